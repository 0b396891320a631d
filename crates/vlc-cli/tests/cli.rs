//! `vlc` end to end on small generated data, and every bad-input case of the CLI.

use assert_cmd::Command;
use predicates::prelude::*;
use std::path::{Path, PathBuf};
use vlc::io::{npy_bytes, NpyType};
use vlc::synthetic::{clustered, queries_near};

const DIM: usize = 24;

fn vlc() -> Command {
    Command::cargo_bin("vlc").unwrap()
}

fn write_f32(path: &Path, rows: usize, cols: usize, data: &[f32]) {
    let body: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, npy_bytes(NpyType::F32, rows, cols, &body)).unwrap();
}

/// The exact `k` nearest neighbours of each of `queries` in `data` (both of DIM), as an int32
/// `.npy`.
fn write_truth(path: &Path, data: &[f32], queries: &[f32], k: usize) {
    let gt: Vec<u8> = vlc::exact_knn(data, queries, DIM, k)
        .unwrap()
        .iter()
        .flat_map(|&i| (i as i32).to_le_bytes())
        .collect();
    let rows = queries.len() / DIM;
    std::fs::write(path, npy_bytes(NpyType::I32, rows, k, &gt)).unwrap();
}

struct Set {
    dir: tempfile::TempDir,
}

impl Set {
    fn new() -> Set {
        let dir = tempfile::tempdir().unwrap();
        let data = clustered(2000, DIM, 16, 0.5, 1);
        let queries = queries_near(&data, DIM, 50, 0.2, 2);
        write_f32(&dir.path().join("base.npy"), 2000, DIM, &data);
        write_f32(&dir.path().join("queries.npy"), 50, DIM, &queries);
        write_truth(&dir.path().join("gt.npy"), &data, &queries, 100);
        Set { dir }
    }
    fn p(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    /// `vlc build -q --anchors 16 EXTRA` of this set's `input` into `output`, which must
    /// succeed.
    fn build(&self, input: &str, output: &str, extra: &[&str]) {
        vlc()
            .args(["build", "-q", "--anchors", "16"])
            .args(extra)
            .arg(self.p(input))
            .arg("-o")
            .arg(self.p(output))
            .assert()
            .success();
    }
    /// `--queries Q --groundtruth G` of this set.
    fn truth_args(&self) -> [std::ffi::OsString; 4] {
        [
            "--queries".into(),
            self.p("queries.npy").into(),
            "--groundtruth".into(),
            self.p("gt.npy").into(),
        ]
    }
}

/// `vlc eval --json` of `index` on the set's queries at the given nprobe list, with `extra`
/// options.
fn eval_json(s: &Set, index: &Path, nprobe: &str, extra: &[&str]) -> serde_json::Value {
    let out = vlc()
        .args(["eval", "--nprobe", nprobe, "--json"])
        .args(extra)
        .arg(index)
        .args(s.truth_args())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice(&out).unwrap()
}

/// `vlc eval --batch-size N` searches the queries N per call and scores them in query order:
/// 50 queries in calls of 7 (the last of 1) and one at a time find what one call finds.
#[test]
fn eval_in_batches_scores_every_query_in_order() {
    let s = Set::new();
    vlc()
        .args(["build", "--codec", "sq8", "--anchors", "32", "-q"])
        .arg(s.p("base.npy"))
        .arg("-o")
        .arg(s.p("b.vlc"))
        .assert()
        .success();
    let recall = |batch: &str| -> (f64, serde_json::Value) {
        let j = eval_json(&s, &s.p("b.vlc"), "8", &["--batch-size", batch]);
        (
            j["results"][0]["recall@10"].as_f64().unwrap(),
            j["batch_size"].clone(),
        )
    };
    let (whole, size) = recall("0");
    assert_eq!(size, 0);
    assert!(whole > 0.9, "recall@10 in one call {whole}");
    for batch in ["7", "1"] {
        let (r, size) = recall(batch);
        assert_eq!(size.to_string(), batch);
        // One call ranks the anchors by a GEMM, calls of fewer than 16 by dot products: their
        // rounding may swap a near tie, nothing more.
        assert!(
            (r - whole).abs() <= 0.01,
            "batch {batch}: {r} against {whole}"
        );
    }
}

#[test]
fn build_eval_search_info_end_to_end() {
    let s = Set::new();
    vlc()
        .args([
            "build",
            "--codec",
            "rabitq1",
            "--refine",
            "sq8",
            "--anchors",
            "32",
            "-q",
        ])
        .arg(s.p("base.npy"))
        .arg("-o")
        .arg(s.p("i.vlc"))
        .assert()
        .success()
        .stdout(predicate::str::contains("bytes/vector").and(predicate::str::contains("32 (")));
    let j = eval_json(&s, &s.p("i.vlc"), "4,32", &[]);
    let results = j["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    let r10 = results[1]["recall@10"].as_f64().unwrap();
    assert!(r10 > 0.9, "recall@10 at full probe {r10}");
    assert!(results[1]["recall@100"].as_f64().is_some());
    assert!(j["bytes_per_vector"].as_f64().unwrap() < (DIM * 4 * 2) as f64);

    vlc()
        .arg("search")
        .arg(s.p("i.vlc"))
        .arg(s.p("queries.npy"))
        .args(["-k", "5", "--nprobe", "8", "-o"])
        .arg(s.p("hits.npy"))
        .assert()
        .success();
    let ids = std::fs::read(s.p("hits.npy")).unwrap();
    assert!(ids.starts_with(b"\x93NUMPY"));
    assert_eq!(ids.len(), 128 + 50 * 5 * 8);
    assert!(s.p("hits.distances.npy").exists());
    let out = vlc()
        .arg("search")
        .arg(s.p("i.vlc"))
        .arg(s.p("queries.npy"))
        .args(["-k", "3", "--view"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let rows: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 50);

    vlc()
        .arg("info")
        .arg(s.p("i.vlc"))
        .assert()
        .success()
        .stdout(predicate::str::contains("rabitq1").and(predicate::str::contains("CODE")));
    let out = vlc()
        .arg("info")
        .arg("--json")
        .arg(s.p("i.vlc"))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(j["vectors"], 2000);
    assert_eq!(j["refine"], "sq8");
    assert_eq!(j["centred"], false);
}

/// Vectors far from the origin next to their spread (every coordinate moved by 200): the
/// index is centred, `info` says so, and recall is what it is at the origin.
#[test]
fn data_far_from_the_origin_is_centred_and_keeps_its_recall() {
    let s = Set::new();
    let far = |name: &str| {
        let (rows, data) = vlc::io::read_vectors(&s.p(name), None)
            .map(|m| (m.rows, m.data))
            .unwrap();
        let moved: Vec<f32> = data.iter().map(|v| v + 200.0).collect();
        write_f32(&s.p(&format!("far_{name}")), rows, DIM, &moved);
    };
    far("base.npy");
    far("queries.npy");
    let mut recall = Vec::new();
    for (base, queries) in [
        ("base.npy", "queries.npy"),
        ("far_base.npy", "far_queries.npy"),
    ] {
        let index = s.p(&format!("{base}.vlc"));
        vlc()
            .args(["build", "--codec", "rabitq1", "--anchors", "32", "-q"])
            .arg(s.p(base))
            .arg("-o")
            .arg(&index)
            .assert()
            .success();
        let out = vlc()
            .args(["eval", "--nprobe", "32", "--json"])
            .arg(&index)
            .arg("--queries")
            .arg(s.p(queries))
            .arg("--groundtruth")
            .arg(s.p("gt.npy"))
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
        recall.push(j["results"][0]["recall@10"].as_f64().unwrap());
    }
    assert!(
        recall[1] >= recall[0] - 0.02,
        "recall@10 {recall:?} (origin, far)"
    );
    vlc()
        .arg("info")
        .arg(s.p("far_base.npy.vlc"))
        .assert()
        .success()
        .stdout(
            predicate::str::contains("centre      subtracted")
                .and(predicate::str::contains("CNTR")),
        );
    let out = vlc()
        .args(["info", "--json"])
        .arg(s.p("far_base.npy.vlc"))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(j["centred"], true);
    assert!(j["centre_norm"].as_f64().unwrap() > 900.0, "{j}");
}

/// `--refine f16` reranks with half-float residuals and `--refine f32` with the residuals
/// themselves: at full probe, recall@10 is near exact (f16) and exact (f32), above what the
/// 1-bit code alone gives; a refine tier that is not a refine codec is refused.
#[test]
fn float_refine_tiers_are_near_exact_at_full_probe() {
    let s = Set::new();
    let recall = |refine: &str| {
        let index = s.p(&format!("r-{refine}.vlc"));
        vlc()
            .args(["build", "--codec", "rabitq1", "--anchors", "16", "-q"])
            .args(["--refine", refine])
            .arg(s.p("base.npy"))
            .arg("-o")
            .arg(&index)
            .assert()
            .success();
        eval_json(&s, &index, "16", &[])["results"][0]["recall@10"]
            .as_f64()
            .unwrap()
    };
    let (exact, one_bit) = (recall("f16"), recall("none"));
    assert!(exact >= 0.99, "rabitq1+f16 recall@10 {exact}");
    let single = recall("f32");
    assert!(
        single >= exact,
        "rabitq1+f32 {single} vs rabitq1+f16 {exact}"
    );
    assert!(single >= 0.999, "rabitq1+f32 recall@10 {single}");
    assert!(
        exact > one_bit,
        "f16 rerank {exact} vs 1-bit alone {one_bit}"
    );
    vlc()
        .args(["build", "--codec", "rabitq1", "--refine", "rabitq2"])
        .arg(s.p("base.npy"))
        .arg("-o")
        .arg(s.p("bad.vlc"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("f32, f16, sq8 or sq4"));
    assert!(!s.p("bad.vlc").exists());
}

#[test]
fn build_json_and_cosine() {
    let s = Set::new();
    let out = vlc()
        .args(["build", "--json", "--metric", "cosine", "--codec", "sq4"])
        .arg(s.p("base.npy"))
        .arg("-o")
        .arg(s.p("c.vlc"))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(j["metric"], "cosine");
    assert!(j["compression_vs_f32"].as_f64().unwrap() > 1.0);
    vlc()
        .arg("info")
        .arg(s.p("c.vlc"))
        .assert()
        .success()
        .stdout(predicate::str::contains("normalised"));
}

#[test]
fn bad_inputs_fail_with_clear_errors_and_leave_the_old_index() {
    let s = Set::new();
    s.build("base.npy", "good.vlc", &[]);
    let good = std::fs::read(s.p("good.vlc")).unwrap();

    // NaN in row 7.
    let mut data = clustered(100, DIM, 4, 0.5, 1);
    data[7 * DIM + 3] = f32::NAN;
    write_f32(&s.p("nan.npy"), 100, DIM, &data);
    vlc()
        .arg("build")
        .arg(s.p("nan.npy"))
        .arg("-o")
        .arg(s.p("good.vlc"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("row 7, column 3"));
    // A zero vector in row 9, where the cosine metric needs a direction (l2 takes it).
    let mut data = clustered(100, DIM, 4, 0.5, 1);
    data[9 * DIM..10 * DIM].fill(0.0);
    write_f32(&s.p("zero.npy"), 100, DIM, &data);
    vlc()
        .args(["build", "--metric", "cosine"])
        .arg(s.p("zero.npy"))
        .arg("-o")
        .arg(s.p("good.vlc"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("zero vector").and(predicate::str::contains("row 9")));
    // A row long enough for squared distances to overflow f32 (row 11), in the vectors and
    // in the queries; and a set so tightly packed that its distances are subnormal in f32.
    let mut data = clustered(100, DIM, 4, 0.5, 1);
    data[11 * DIM] = 1e19;
    write_f32(&s.p("huge.npy"), 100, DIM, &data);
    for command in ["build", "search"] {
        let mut cmd = vlc();
        cmd.arg(command);
        if command == "search" {
            cmd.arg(s.p("good.vlc"));
        }
        cmd.arg(s.p("huge.npy"))
            .arg("-o")
            .arg(s.p(if command == "build" {
                "good.vlc"
            } else {
                "hits.json"
            }))
            .assert()
            .failure()
            .stderr(predicate::str::contains("too large").and(predicate::str::contains("row 11")));
    }
    let tiny: Vec<f32> = clustered(100, DIM, 4, 0.5, 1)
        .iter()
        .map(|v| v * 1e-22)
        .collect();
    write_f32(&s.p("tiny.npy"), 100, DIM, &tiny);
    vlc()
        .arg("build")
        .arg(s.p("tiny.npy"))
        .arg("-o")
        .arg(s.p("good.vlc"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("too close together"));
    // Empty input.
    write_f32(&s.p("empty.npy"), 0, DIM, &[]);
    vlc()
        .arg("build")
        .arg(s.p("empty.npy"))
        .arg("-o")
        .arg(s.p("good.vlc"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("empty"));
    // Wrong dimension (explicit --dim and queries of another width).
    vlc()
        .arg("build")
        .arg(s.p("base.npy"))
        .args(["--dim", "25", "-o"])
        .arg(s.p("good.vlc"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("expected 25, got 24"));
    write_f32(&s.p("q7.npy"), 2, 7, &[0.5; 14]);
    vlc()
        .arg("search")
        .arg(s.p("good.vlc"))
        .arg(s.p("q7.npy"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("expected 24, got 7"));
    // Truncated raw file.
    std::fs::write(s.p("raw.f32"), [0u8; 30]).unwrap();
    vlc()
        .arg("build")
        .arg(s.p("raw.f32"))
        .args(["--dim", "4", "-o"])
        .arg(s.p("good.vlc"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("multiple"));
    // Too many anchors, zero anchors.
    vlc()
        .arg("build")
        .arg(s.p("base.npy"))
        .args(["--anchors", "5000", "-o"])
        .arg(s.p("good.vlc"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("5000 anchors"));
    vlc()
        .arg("build")
        .arg(s.p("base.npy"))
        .args(["--anchors", "0", "-o"])
        .arg(s.p("good.vlc"))
        .assert()
        .failure();
    // An output that cannot be written (its directory missing, a directory named): an error
    // before any training or searching.
    for (command, target) in [
        ("build", "no_such_dir/x.vlc"),
        ("build", "."),
        ("search", "no_such_dir/x.npy"),
    ] {
        let mut cmd = vlc();
        cmd.arg(command);
        if command == "search" {
            cmd.arg(s.p("good.vlc"));
        }
        cmd.arg(s.p(if command == "build" {
            "base.npy"
        } else {
            "queries.npy"
        }))
        .arg("-o")
        .arg(s.p(target))
        .assert()
        .failure()
        .stdout(predicate::str::is_empty())
        .stderr(
            predicate::str::contains("cannot write the output")
                .and(predicate::str::contains("backend").not()),
        );
    }
    // k = 0, nprobe = 0 (k and nprobe above the index are clamped: see
    // `search_of_a_small_index_with_default_parameters_returns_every_vector`), a NaN in a
    // query: an error, and no half-opened JSON array on standard output.
    vlc()
        .arg("search")
        .arg(s.p("good.vlc"))
        .arg(s.p("queries.npy"))
        .args(["-k", "0"])
        .assert()
        .failure()
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("`k`"));
    vlc()
        .arg("search")
        .arg(s.p("good.vlc"))
        .arg(s.p("queries.npy"))
        .args(["--nprobe", "0"])
        .assert()
        .failure()
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("`nprobe`"));
    let mut queries = clustered(5, DIM, 4, 0.5, 2);
    queries[2 * DIM + 1] = f32::NAN;
    write_f32(&s.p("nan_queries.npy"), 5, DIM, &queries);
    vlc()
        .arg("search")
        .arg(s.p("good.vlc"))
        .arg(s.p("nan_queries.npy"))
        .assert()
        .failure()
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("row 2, column 1"));
    vlc()
        .arg("eval")
        .arg(s.p("good.vlc"))
        .args(s.truth_args())
        .args(["--nprobe", "0"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("nprobe 0"));
    vlc()
        .arg("eval")
        .arg(s.p("good.vlc"))
        .args(s.truth_args())
        .args(["--probe-margin=-1"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--probe-margin -1"));
    vlc()
        .arg("search")
        .arg(s.p("good.vlc"))
        .arg(s.p("queries.npy"))
        .args(["--probe-margin", "nan"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("probe_margin"));
    // Unreadable paths, foreign and truncated index files.
    vlc()
        .arg("build")
        .arg(s.p("missing.npy"))
        .arg("-o")
        .arg(s.p("good.vlc"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("missing.npy"));
    vlc()
        .arg("info")
        .arg(s.p("base.npy"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("not a VLC index"));
    std::fs::write(s.p("cut.vlc"), &good[..good.len() / 2]).unwrap();
    vlc()
        .arg("info")
        .arg(s.p("cut.vlc"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("truncated"));
    vlc()
        .arg("build")
        .arg(s.p("base.npy"))
        .arg("-o")
        .arg(s.p("no/such/dir/x.vlc"))
        .assert()
        .failure();
    // The good index is untouched and no temporary files are left behind.
    assert_eq!(std::fs::read(s.p("good.vlc")).unwrap(), good);
    let stray: Vec<_> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(stray.is_empty());
}

/// An output path that names one of the command's inputs, however spelt, is refused before
/// any work and the input is kept: `build`'s and `add`'s vectors, `search`'s index and
/// queries (also through the distances file an `.npy` output writes beside it), and
/// `groundtruth`'s base and queries.
#[test]
fn outputs_that_name_an_input_are_refused_and_the_input_kept() {
    let s = Set::new();
    s.build("base.npy", "good.vlc", &[]);
    std::fs::copy(s.p("queries.npy"), s.p("hits.distances.npy")).unwrap();
    let names = ["base.npy", "queries.npy", "good.vlc", "hits.distances.npy"];
    let before: Vec<Vec<u8>> = names
        .iter()
        .map(|n| std::fs::read(s.p(n)).unwrap())
        .collect();
    let respelt = s.dir.path().join(".").join("base.npy");
    // (command, its inputs in this set, its output)
    // (command, its inputs in this set, its output, the error)
    let clash = "would replace that input";
    let cases: [(&str, &[&str], PathBuf, &str); 7] = [
        ("build", &["base.npy"], s.p("base.npy"), clash),
        ("build", &["base.npy"], respelt, clash),
        (
            "add",
            &["good.vlc", "queries.npy"],
            s.p("queries.npy"),
            clash,
        ),
        (
            "search",
            &["good.vlc", "queries.npy"],
            s.p("queries.npy"),
            clash,
        ),
        // A search writes .npy or .json only, which is checked first.
        (
            "search",
            &["good.vlc", "queries.npy"],
            s.p("good.vlc"),
            "must end in .npy",
        ),
        (
            "search",
            &["good.vlc", "hits.distances.npy"],
            s.p("hits.npy"),
            clash,
        ),
        (
            "groundtruth",
            &["base.npy", "queries.npy"],
            s.p("base.npy"),
            clash,
        ),
    ];
    for (command, inputs, output, error) in &cases {
        vlc()
            .arg(command)
            .args(inputs.iter().map(|name| s.p(name)))
            .arg("-o")
            .arg(output)
            .assert()
            .failure()
            .stderr(predicate::str::contains(*error));
    }
    for (name, bytes) in names.iter().zip(&before) {
        assert_eq!(&std::fs::read(s.p(name)).unwrap(), bytes, "{name}");
    }
    assert!(!s.p("hits.npy").exists());
    // A JSON output writes no distances file, so the same queries file is no clash there.
    vlc()
        .arg("search")
        .arg(s.p("good.vlc"))
        .arg(s.p("hits.distances.npy"))
        .arg("-o")
        .arg(s.p("hits.json"))
        .assert()
        .success();
}

/// `vlc search` reads its queries, and writes its results, a batch at a time: calls of whole
/// blocks of the library's (4,096 queries) give the bytes of one call, in .npy, a .json file
/// and on stdout; a bad query is named by its row in the file; a wrong output extension is
/// refused before any search.
#[test]
fn search_in_batches_gives_the_results_of_one_call() {
    let s = Set::new();
    s.build("base.npy", "good.vlc", &[]);
    let data = clustered(2000, DIM, 16, 0.5, 1);
    let mut queries = queries_near(&data, DIM, 9000, 0.2, 5);
    write_f32(&s.p("many.npy"), 9000, DIM, &queries);
    let search = |batch: &str, output: Option<&str>| {
        let mut command = vlc();
        command
            .args(["search", "-k", "12", "--nprobe", "4", "--batch-size", batch])
            .arg(s.p("good.vlc"))
            .arg(s.p("many.npy"));
        if let Some(name) = output {
            command.arg("-o").arg(s.p(name));
        }
        command.assert().success().get_output().stdout.clone()
    };
    let read = |name: &str| std::fs::read(s.p(name)).unwrap();
    let whole = search("0", None);
    search("0", Some("one.npy"));
    search("0", Some("one.json"));
    // Whole blocks; and on the CPU any batch of 16 or more queries, here one that leaves a
    // last batch of 10, which joins the one before (4,495 + 4,505).
    for batch in ["4096", "8192", "4495", "17"] {
        assert_eq!(search(batch, None), whole, "stdout, batches of {batch}");
        search(batch, Some("parts.npy"));
        search(batch, Some("parts.json"));
        assert_eq!(read("parts.npy"), read("one.npy"), "batches of {batch}");
        assert_eq!(read("parts.distances.npy"), read("one.distances.npy"));
        assert_eq!(read("parts.json"), read("one.json"));
    }
    assert_eq!(whole.strip_suffix(b"\n").unwrap(), read("one.json"));
    // Odd batch sizes: every query answered, in order, as many neighbours as asked.
    search("7", Some("odd.json"));
    let rows: serde_json::Value = serde_json::from_slice(&read("odd.json")).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 9000);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["query"], i);
        assert_eq!(row["ids"].as_array().unwrap().len(), 12);
    }
    // A bad query in a later batch is named by its row in the file; nothing is written.
    queries[5000 * DIM + 3] = f32::NAN;
    write_f32(&s.p("bad.npy"), 9000, DIM, &queries);
    vlc()
        .args(["search", "--batch-size", "4096"])
        .arg(s.p("good.vlc"))
        .arg(s.p("bad.npy"))
        .arg("-o")
        .arg(s.p("bad_hits.npy"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("at row 5000, column 3"));
    assert!(!s.p("bad_hits.npy").exists() && !s.p("bad_hits.distances.npy").exists());
    // Checked before the index is even opened.
    vlc()
        .arg("search")
        .arg(s.p("no-such-index.vlc"))
        .arg(s.p("many.npy"))
        .arg("-o")
        .arg(s.p("hits.txt"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("must end in .npy"));
}

/// The ids of the exact `k` nearest of the `allowed` rows of [`Set`]'s base to each of its
/// queries, nearest first, as rows of `k`.
fn exact_among(allowed: &[u32], k: usize) -> Vec<i64> {
    let data = clustered(2000, DIM, 16, 0.5, 1);
    let queries = queries_near(&data, DIM, 50, 0.2, 2);
    let subset: Vec<f32> = allowed
        .iter()
        .flat_map(|&i| data[i as usize * DIM..][..DIM].iter().copied())
        .collect();
    vlc::exact_knn(&subset, &queries, DIM, k)
        .unwrap()
        .iter()
        .map(|&r| allowed[r as usize] as i64)
        .collect()
}

/// `vlc search --allow-ids`: only the listed ids come back, the exact ones among them with an
/// f32 refine tier and every list probed; ids not in the index are noted; GPU backends and bad
/// id files are refused before any output is written.
#[test]
fn search_with_allowed_ids_returns_only_those() {
    let s = Set::new();
    s.build(
        "base.npy",
        "exact.vlc",
        &["--codec", "sq4", "--refine", "f32"],
    );
    let allowed: Vec<u32> = (0..2000).filter(|i| i % 5 == 2).collect();
    let text: Vec<String> = allowed.iter().map(u32::to_string).collect();
    // Text of ids separated by commas and newlines, one id the index does not hold.
    std::fs::write(s.p("allowed.txt"), format!("{},\n99999\n", text.join(","))).unwrap();
    vlc()
        .args(["search", "-k", "10", "--nprobe", "16", "--rerank", "2000"])
        .arg(s.p("exact.vlc"))
        .arg(s.p("queries.npy"))
        .arg("--allow-ids")
        .arg(s.p("allowed.txt"))
        .arg("-o")
        .arg(s.p("hits.npy"))
        .assert()
        .success()
        .stderr(predicate::str::contains("1 of the 401 ids in"));
    assert_eq!(read_ids_npy(&s.p("hits.npy")), exact_among(&allowed, 10));
    // Refused: negative ids, a missing file; no output appears.
    for (extra, file, message) in [
        (&[] as &[&str], "negative.txt", "-4 is not an id"),
        (&[][..], "missing.txt", "reading"),
    ] {
        std::fs::write(s.p("negative.txt"), "3 -4").unwrap();
        vlc()
            .arg("search")
            .args(extra)
            .arg(s.p("exact.vlc"))
            .arg(s.p("queries.npy"))
            .arg("--allow-ids")
            .arg(s.p(file))
            .arg("-o")
            .arg(s.p("refused.npy"))
            .assert()
            .failure()
            .stderr(predicate::str::contains(message));
        assert!(!s.p("refused.npy").exists());
    }
}

/// `vlc groundtruth --allow-ids` computes the exact neighbours among the allowed rows (ids
/// still rows of the base), and `vlc eval --allow-ids` scores a filtered search against them,
/// given as --groundtruth or computed from --base: exact search (f32 refine, every candidate
/// rescored) finds all of them. Refused: a truth listing a vector the filter leaves out, a GPU
/// backend, an id beyond the base's rows.
#[test]
fn groundtruth_and_eval_with_allowed_ids() {
    let s = Set::new();
    s.build(
        "base.npy",
        "exact.vlc",
        &["--codec", "sq4", "--refine", "f32"],
    );
    let allowed: Vec<u32> = (0..2000).filter(|i| i % 7 == 3).collect();
    // NumPy's uint32 ids.
    let body: Vec<u8> = allowed.iter().flat_map(|i| i.to_le_bytes()).collect();
    std::fs::write(
        s.p("allowed.npy"),
        npy_bytes(NpyType::U32, 1, allowed.len(), &body),
    )
    .unwrap();
    vlc()
        .args(["groundtruth", "-q", "-k", "20", "--allow-ids"])
        .arg(s.p("allowed.npy"))
        .arg(s.p("base.npy"))
        .arg(s.p("queries.npy"))
        .arg("-o")
        .arg(s.p("gt_allowed.npy"))
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "among the 286 allowed of 2000 vectors",
        ));
    assert_eq!(
        read_ids_npy(&s.p("gt_allowed.npy")),
        exact_among(&allowed, 20)
    );
    let eval = |truth: &[&str], extra: &[&str]| {
        let mut cmd = vlc();
        cmd.args([
            "eval",
            "--nprobe",
            "16",
            "--rerank",
            "2000",
            "--json",
            "--queries",
        ])
        .arg(s.p("queries.npy"))
        .args(truth.iter().map(|t| {
            if t.starts_with("--") {
                t.into()
            } else {
                s.p(t)
            }
        }))
        .arg("--allow-ids")
        .arg(s.p("allowed.npy"))
        .args(extra)
        .arg(s.p("exact.vlc"));
        cmd
    };
    for truth in [["--groundtruth", "gt_allowed.npy"], ["--base", "base.npy"]] {
        let out = eval(&truth, &["--backend", "auto"])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(j["allowed"], 286, "{truth:?}");
        assert_eq!(j["backend"], "auto", "{truth:?}");
        assert_eq!(j["results"][0]["recall@10"], 1.0, "{truth:?}");
    }
    // On a GPU (WGPU: lavapipe in CI), the same exact neighbours among the allowed vectors.
    let out = eval(&["--base", "base.npy"], &["--backend", "wgpu"])
        .output()
        .unwrap();
    if out.status.success() {
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["backend"], "wgpu");
        assert_eq!(j["allowed"], 286);
        assert_eq!(j["results"][0]["recall@10"], 1.0);
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--backend wgpu"), "{err}");
        println!("SKIPPED eval --allow-ids --backend wgpu: no adapter ({err})");
    }
    // The unfiltered truth lists vectors the filter leaves out.
    eval(&["--groundtruth", "gt.npy"], &[])
        .assert()
        .failure()
        .stderr(predicate::str::contains("which --allow-ids leaves out"));
    std::fs::write(s.p("beyond.txt"), "3 2000").unwrap();
    vlc()
        .args(["groundtruth", "-q", "--allow-ids"])
        .arg(s.p("beyond.txt"))
        .arg(s.p("base.npy"))
        .arg(s.p("queries.npy"))
        .arg("-o")
        .arg(s.p("refused.npy"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("id 2000 is not a row of"));
    assert!(!s.p("refused.npy").exists());
}

/// A new index of a few vectors has fewer than the default k (10) and nprobe (32): search
/// with the defaults returns every vector (JSON: the hits only; npy: rows padded with −1 and
/// +inf), and nprobe above the anchor count scans every list.
#[test]
fn search_of_a_small_index_with_default_parameters_returns_every_vector() {
    let s = Set::new();
    let data = clustered(6, DIM, 2, 0.5, 3);
    write_f32(&s.p("six.npy"), 6, DIM, &data);
    vlc()
        .arg("build")
        .arg(s.p("six.npy"))
        .arg("-o")
        .arg(s.p("six.vlc"))
        .assert()
        .success();
    let out = vlc()
        .arg("search")
        .arg(s.p("six.vlc"))
        .arg(s.p("six.npy"))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let rows: serde_json::Value = serde_json::from_slice(&out).unwrap();
    for (q, row) in rows.as_array().unwrap().iter().enumerate() {
        let mut ids: Vec<i64> = row["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        assert_eq!(ids[0], q as i64, "each vector finds itself first");
        assert_eq!(row["distances"].as_array().unwrap().len(), 6);
        ids.sort_unstable();
        assert_eq!(ids, (0..6).collect::<Vec<i64>>());
    }
    vlc()
        .arg("search")
        .arg(s.p("six.vlc"))
        .arg(s.p("six.npy"))
        .args(["-k", "8", "--nprobe", "1000", "-o"])
        .arg(s.p("six_hits.npy"))
        .assert()
        .success();
    // eval's default sweep (nprobe 8 to 128) measures every list once, and says so.
    write_truth(&s.p("six_gt.npy"), &data, &data, 6);
    let out = vlc()
        .arg("eval")
        .arg(s.p("six.vlc"))
        .arg("--queries")
        .arg(s.p("six.npy"))
        .arg("--groundtruth")
        .arg(s.p("six_gt.npy"))
        .arg("--json")
        .assert()
        .success()
        .stderr(predicate::str::contains("measured once at"))
        .get_output()
        .stdout
        .clone();
    let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let points = j["results"].as_array().unwrap();
    assert_eq!(points.len(), 1, "{j}");
    assert_eq!(points[0]["nprobe"], j["anchors"], "{j}");
    assert_eq!(points[0]["recall@1"].as_f64(), Some(1.0), "{j}");
    let ids = vlc::io::read_npy_ids(&s.p("six_hits.npy")).unwrap();
    let dists = vlc::io::read_npy_f32(&s.p("six_hits.distances.npy")).unwrap();
    assert_eq!((ids.rows, ids.cols), (6, 8));
    for q in 0..6 {
        assert!(ids.data[q * 8..q * 8 + 6].iter().all(|&i| i >= 0));
        assert_eq!(&ids.data[q * 8 + 6..(q + 1) * 8], &[-1, -1]);
        assert!(dists.data[q * 8 + 6..(q + 1) * 8]
            .iter()
            .all(|&d| d == f32::INFINITY));
    }
}

#[test]
fn demo_runs_on_the_built_in_sample() {
    let out = vlc()
        .args(["demo", "--json", "--examples", "2"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(j["vectors"], 5000);
    let best = j["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["recall@10"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(best > 0.8, "demo recall@10 {best}");
    assert_eq!(j["examples"].as_array().unwrap().len(), 2);
}

/// Two `vlc add` runs (and two `vlc remove` runs) on one index at once take turns through
/// the index's lock file, so both changes end up in it. Without the lock both read the same
/// index and the later rename dropped the earlier run's change, in every one of five tries.
#[test]
fn concurrent_changes_to_one_index_take_turns() {
    let s = Set::new();
    s.build("base.npy", "good.vlc", &[]);
    let more = clustered(700, DIM, 16, 0.5, 7);
    write_f32(&s.p("a.npy"), 300, DIM, &more[..300 * DIM]);
    write_f32(&s.p("b.npy"), 400, DIM, &more[300 * DIM..]);
    let run_both = |first: &[&str], second: &[&str]| {
        let spawn = |args: &[&str]| {
            std::process::Command::new(assert_cmd::cargo::cargo_bin("vlc"))
                .args(args.iter().map(|a| {
                    if a.ends_with(".npy") || a.ends_with(".vlc") {
                        s.p(a).into_os_string()
                    } else {
                        a.into()
                    }
                }))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        };
        let (mut one, mut two) = (spawn(first), spawn(second));
        assert!(one.wait().unwrap().success(), "{first:?}");
        assert!(two.wait().unwrap().success(), "{second:?}");
        vlc::Index::view(s.p("c.vlc")).unwrap()
    };
    for round in 0..3 {
        std::fs::copy(s.p("good.vlc"), s.p("c.vlc")).unwrap();
        let grown = run_both(
            &["add", "c.vlc", "a.npy", "--backend", "cpu"],
            &["add", "c.vlc", "b.npy", "--backend", "cpu"],
        );
        assert_eq!(grown.len(), 2700, "round {round}");
        let smaller = run_both(
            &["remove", "c.vlc", "--ids", "1,2,3"],
            &["remove", "c.vlc", "--ids", "2000,2001"],
        );
        assert_eq!(smaller.len(), 2695, "round {round}");
    }
    assert!(s.p("c.vlc.lock").exists());
}

/// SIGTERM (as SIGINT and SIGHUP) ends a run by that signal, through the handler that removes
/// its unfinished files, and a signal the run was started with ignored (SIGHUP under `nohup`)
/// stays ignored. The run waits on the index's lock, which this test holds, so the signals
/// arrive at a known point. A build leaves no partial files of ended processes beside its
/// output.
#[cfg(unix)]
#[test]
fn interrupted_runs_end_by_their_signal_and_leave_no_partial_files() {
    use std::io::BufRead;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let s = Set::new();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let ended = child.id();
    child.wait().unwrap();
    let partial = s.p(&format!(".good.vlc.tmp-{ended}-0"));
    std::fs::write(&partial, b"left by a killed build").unwrap();
    s.build("base.npy", "good.vlc", &[]);
    assert!(!partial.exists(), "a killed build's partial file stays");
    let before = std::fs::read(s.p("good.vlc")).unwrap();
    let lock = std::fs::File::create(s.p("good.vlc.lock")).unwrap();
    lock.lock().unwrap();
    let mut add = std::process::Command::new(assert_cmd::cargo::cargo_bin("vlc"));
    add.args(["add", "--backend", "cpu"])
        .arg(s.p("good.vlc"))
        .arg(s.p("queries.npy"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // SAFETY: between fork and exec the closure only calls `signal`, which is
    // async-signal-safe, with constant arguments.
    unsafe {
        add.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut run = add.spawn().unwrap();
    let mut stderr = std::io::BufReader::new(run.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.starts_with("waiting for another run"), "{line}");
    let pid = run.id() as i32;
    let signal = |number: i32| {
        // SAFETY: `kill` takes plain integers; the child is ours and has not been reaped.
        assert_eq!(unsafe { libc::kill(pid, number) }, 0);
    };
    signal(libc::SIGHUP);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        run.try_wait().unwrap().is_none(),
        "SIGHUP was ignored at start"
    );
    signal(libc::SIGTERM);
    let status = run.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    assert_eq!(std::fs::read(s.p("good.vlc")).unwrap(), before);
    let partial_files: Vec<_> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".tmp-"))
        .collect();
    assert!(partial_files.is_empty(), "{partial_files:?}");
}

#[test]
fn add_grows_an_index_in_place_or_into_another_file_and_keeps_it_on_errors() {
    let s = Set::new();
    let data = clustered(2000, DIM, 16, 0.5, 1);
    write_f32(&s.p("first.npy"), 1500, DIM, &data[..1500 * DIM]);
    write_f32(&s.p("rest.npy"), 500, DIM, &data[1500 * DIM..]);
    s.build("first.npy", "part.vlc", &["--codec", "sq8"]);
    let before = std::fs::read(s.p("part.vlc")).unwrap();
    // Into another file: the index stays as it was.
    let out = vlc()
        .args(["add", "-q", "--json"])
        .arg(s.p("part.vlc"))
        .arg(s.p("rest.npy"))
        .arg("-o")
        .arg(s.p("grown.vlc"))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        (
            j["added"].as_u64(),
            j["first_id"].as_u64(),
            j["vectors"].as_u64()
        ),
        (Some(500), Some(1500), Some(2000))
    );
    assert_eq!(std::fs::read(s.p("part.vlc")).unwrap(), before);
    // The grown index finds the whole set: ids are the rows of base.npy, as the ground truth's.
    let r = eval_json(&s, &s.p("grown.vlc"), "16", &[]);
    let recall = r["results"][0]["recall@10"].as_f64().unwrap();
    assert!(recall > 0.9, "recall@10 {recall} after add");
    // Wrong dimension, NaN, a missing file: an error naming it, and the index unchanged.
    write_f32(&s.p("wide.npy"), 3, DIM + 1, &vec![0.5; 3 * (DIM + 1)]);
    let mut nan = data[..10 * DIM].to_vec();
    nan[6 * DIM + 2] = f32::NAN;
    write_f32(&s.p("nan.npy"), 10, DIM, &nan);
    for (input, message) in [
        ("wide.npy", "expected 24, got 25"),
        ("nan.npy", "row 6, column 2"),
        ("missing.npy", "missing.npy"),
    ] {
        vlc()
            .args(["add", "-q"])
            .arg(s.p("part.vlc"))
            .arg(s.p(input))
            .assert()
            .failure()
            .stderr(predicate::str::contains(message));
        assert_eq!(std::fs::read(s.p("part.vlc")).unwrap(), before, "{input}");
    }
    // In place.
    vlc()
        .args(["add", "-q"])
        .arg(s.p("part.vlc"))
        .arg(s.p("rest.npy"))
        .assert()
        .success()
        .stdout(predicate::str::contains("ids            1500 to 1999"));
    let r = eval_json(&s, &s.p("part.vlc"), "16", &[]);
    assert_eq!(r["results"][0]["recall@10"].as_f64().unwrap(), recall);
}

#[test]
fn remove_drops_ids_from_lists_files_and_keeps_the_index_on_errors() {
    let s = Set::new();
    s.build("base.npy", "m.vlc", &["--codec", "sq8"]);
    let before = std::fs::read(s.p("m.vlc")).unwrap();
    // An id that is not there, or a file that is not ids: an error, and the index unchanged.
    std::fs::write(s.p("bad.txt"), "5\nseven\n").unwrap();
    for (args, message) in [
        (vec!["--ids", "5,2000"], "id 2000 is not in the index"),
        (vec!["--ids-file", "bad.txt"], "`seven` is not an id"),
    ] {
        let args: Vec<std::ffi::OsString> = args
            .iter()
            .map(|a| {
                if a.ends_with(".txt") {
                    s.p(a).into()
                } else {
                    a.into()
                }
            })
            .collect();
        vlc()
            .arg("remove")
            .arg(s.p("m.vlc"))
            .args(args)
            .assert()
            .failure()
            .stderr(predicate::str::contains(message));
        assert_eq!(std::fs::read(s.p("m.vlc")).unwrap(), before);
    }
    // By list, by text file and by .npy, in place.
    std::fs::write(s.p("ids.txt"), "10\n11, 12\n").unwrap();
    let npy: Vec<u8> = [20i64, 21].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(s.p("ids.npy"), npy_bytes(NpyType::I64, 1, 2, &npy)).unwrap();
    vlc()
        .args(["remove", "--ids", "0,1"])
        .arg(s.p("m.vlc"))
        .assert()
        .success();
    let out = vlc()
        .args(["remove", "--json", "--ids-file"])
        .arg(s.p("ids.txt"))
        .arg(s.p("m.vlc"))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        (j["removed"].as_u64(), j["vectors"].as_u64()),
        (Some(3), Some(1995))
    );
    vlc()
        .args(["remove", "--ids-file"])
        .arg(s.p("ids.npy"))
        .arg(s.p("m.vlc"))
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "1993 left; the next added gets id 2000",
        ));
    // The removed ids never come back from a search.
    vlc()
        .args(["search", "-k", "10", "--nprobe", "16"])
        .arg(s.p("m.vlc"))
        .arg(s.p("base.npy"))
        .arg("-o")
        .arg(s.p("hits.json"))
        .assert()
        .success();
    let hits: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.p("hits.json")).unwrap()).unwrap();
    let all_ids: Vec<u64> = hits
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|q| q["ids"].as_array().unwrap().clone())
        .map(|id| id.as_u64().unwrap())
        .collect();
    assert_eq!(all_ids.len(), 2000 * 10);
    for gone in [0, 1, 10, 11, 12, 20, 21] {
        assert!(!all_ids.contains(&gone), "removed id {gone} returned");
    }
}

#[test]
fn help_explains_commands() {
    vlc().arg("--help").assert().success().stdout(
        predicate::str::contains("build")
            .and(predicate::str::contains("add"))
            .and(predicate::str::contains("demo")),
    );
    vlc()
        .args(["build", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("--codec").and(predicate::str::contains("anchor-only")));
}

#[test]
fn pcaq_builds_at_the_bits_asked_and_rejects_bad_bits() {
    let s = Set::new();
    vlc()
        .args([
            "build",
            "--codec",
            "pcaq2.5",
            "--anchors",
            "16",
            "-q",
            "--json",
        ])
        .arg(s.p("base.npy"))
        .arg("-o")
        .arg(s.p("p.vlc"))
        .assert()
        .success()
        .stdout(predicate::str::contains("\"codec\": \"pcaq\""));
    // 24 dims at 2.5 bits: round(2.5 · 24 / 8) = 8 bytes of bit planes, and two pairs of
    // 8-bit factors (first stage, full code); anchors stored as int8 by default.
    vlc()
        .arg("info")
        .arg(s.p("p.vlc"))
        .assert()
        .success()
        .stdout(
            predicate::str::contains("pcaq (12 bytes/vector)")
                .and(predicate::str::contains("stored as int8")),
        );
    for bad in ["pcaq0", "pcaq9", "pcaqz"] {
        vlc()
            .args(["build", "--codec", bad, "-q"])
            .arg(s.p("base.npy"))
            .arg("-o")
            .arg(s.p("p.vlc"))
            .assert()
            .failure()
            .stderr(predicate::str::contains(bad));
    }
    // The failed builds left the good index in place.
    vlc().arg("info").arg(s.p("p.vlc")).assert().success();
}

#[test]
fn bench_sweeps_configs_with_anchor_precision_and_writes_outputs() {
    let s = Set::new();
    let out = s.p("bench-out");
    vlc()
        .args([
            "--threads",
            "2",
            "bench",
            "--nprobe",
            "4,16",
            "--repeat",
            "1",
        ])
        .args(["--configs", "pcaq0.5,pcaq0.5@int4,rabitq1+sq8"])
        .arg("--base")
        .arg(s.p("base.npy"))
        .args(s.truth_args())
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let text = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    let points: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let bytes = |config: &str| {
        let p: Vec<&serde_json::Value> = points
            .iter()
            .filter(|p| p["config"] == config && p["rerank"] == 0)
            .collect();
        assert_eq!(p.len(), 2, "{config}: one point per nprobe");
        // The default's smaller pools (50, 30) run at the nprobe values of --rerank-nprobe
        // (8 to 128) only: here at 16, not 4.
        let mut smaller: Vec<(u64, u64)> = points
            .iter()
            .filter(|p| p["config"] == config && p["rerank"] != 0)
            .map(|p| (p["rerank"].as_u64().unwrap(), p["nprobe"].as_u64().unwrap()))
            .collect();
        smaller.sort();
        assert_eq!(smaller, [(30, 16), (50, 16)], "{config}");
        p[0]["bytes_per_vector"].as_f64().unwrap()
    };
    // int4 anchors take half the bytes of int8 ones.
    let saved = bytes("pcaq0.5") - bytes("pcaq0.5@int4");
    assert!(saved > 0.0, "int4 anchors saved {saved} bytes/vector");
    assert!(bytes("rabitq1+sq8") > bytes("pcaq0.5"));
    for p in &points {
        let r = p["recall@10"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&r) && r > 0.3, "{p}");
    }
    for f in ["results.md", "recall_qps.svg", "recall_bytes.svg"] {
        assert!(out.join(f).exists(), "{f} written");
    }
    // A bad configuration fails before any build, naming itself and what is wrong.
    for (bad, why) in [
        ("pcaq0.5@int3", "int3"),
        ("@int4", "codec"),
        ("rabitq1+sq9", "sq9"),
    ] {
        vlc()
            .args(["bench", "--configs", bad, "--out"])
            .arg(&out)
            .arg("--base")
            .arg(s.p("base.npy"))
            .args(s.truth_args())
            .assert()
            .failure()
            .stderr(
                predicate::str::contains(format!("config `{bad}`"))
                    .and(predicate::str::contains(why)),
            );
    }
}

#[test]
fn bench_meets_each_peer_at_its_footprint_and_build_fills_a_budget() {
    let s = Set::new();
    let peers = s.p("peers.jsonl");
    let peer = |bytes: f64| {
        format!(
            r#"{{"system":"faiss","config":"peer{bytes}","nprobe":4,"bytes_per_vector":{bytes},"recall@1":0.5,"recall@10":0.5,"qps":1000.0,"threads":1}}"#
        )
    };
    // Two points at one footprint, one at another, one above pcaq's largest size (8 bits per
    // dimension: about DIM + 9 bytes here), and one below its smallest (skipped, with a note,
    // not a failure).
    let lines = [peer(30.04), peer(30.04), peer(32.0), peer(500.0), peer(2.0)].join("\n");
    std::fs::write(&peers, lines).unwrap();
    let run = |out: &Path, extra: &[&str]| {
        let skipped = !extra.contains(&"false");
        vlc()
            .args(["bench", "--nprobe", "2,4", "--repeat", "1", "--rerank", "0"])
            .args(["--configs", "pcaq1", "--probe-margin", "0.5"])
            .args(extra)
            .arg("--peers")
            .arg(&peers)
            .arg("--base")
            .arg(s.p("base.npy"))
            .args(s.truth_args())
            .arg("--out")
            .arg(out)
            .assert()
            .success()
            .stderr(if skipped {
                predicate::str::contains("pcaq:2B")
                    .and(predicate::str::contains("skipped"))
                    .boxed()
            } else {
                predicate::str::contains("pcaq:2B").not().boxed()
            });
        let text = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
        let vlc_points: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|p| p["system"] == "vlc")
            .collect();
        // Each configuration: nprobe 2 and 4 fixed, then margin 0.5 capped at nprobe 4.
        for p in vlc_points.iter().filter(|p| p["probe_margin"].is_number()) {
            assert_eq!(p["probe_margin"].as_f64(), Some(0.5), "{p}");
            assert_eq!(p["nprobe"].as_u64(), Some(4), "{p}");
            assert!(p["config"].as_str().unwrap().ends_with(" m0.5"), "{p}");
        }
        let fixed: Vec<&serde_json::Value> = vlc_points
            .iter()
            .filter(|p| !p["probe_margin"].is_number())
            .collect();
        assert_eq!(fixed.len(), 2 * (vlc_points.len() - fixed.len()), "{text}");
        fixed
            .into_iter()
            .filter(|p| p["nprobe"] == 4)
            .map(|p| {
                (
                    p["config"].as_str().unwrap().to_string(),
                    p["bytes_per_vector"].as_f64().unwrap(),
                )
            })
            .collect::<Vec<_>>()
    };
    let points = run(&s.p("matched"), &[]);
    let configs: Vec<&str> = points.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(configs, ["pcaq1", "pcaq:30B", "pcaq:32B"]);
    for (config, bytes) in &points[1..] {
        let budget: f64 = config[5..config.len() - 1].parse().unwrap();
        assert!(
            *bytes <= budget && *bytes > budget - 2.0,
            "{config}: {bytes} B/vector"
        );
    }
    let points = run(&s.p("unmatched"), &["--match-peers", "false"]);
    assert_eq!(points.len(), 1, "{points:?}");

    // `vlc build --bytes-per-vector`: pcaq under the budget; refused with another codec, and
    // below the smallest size, with the good index left in place.
    let index = s.p("budget.vlc");
    vlc()
        .args([
            "build",
            "--backend",
            "cpu",
            "-q",
            "--bytes-per-vector",
            "33",
        ])
        .arg(s.p("base.npy"))
        .arg("-o")
        .arg(&index)
        .assert()
        .success()
        .stdout(predicate::str::contains("pcaq"));
    let size = std::fs::metadata(&index).unwrap().len();
    assert!(size as f64 <= 33.0 * 2000.0, "{size} bytes");
    for (args, why) in [
        (&["--codec", "sq8"][..], "give the codec pcaq"),
        (&["--codec", "pcaq2"][..], "not `pcaq2`"),
        (
            &["--bytes-per-vector", "2"][..],
            "below the smallest pcaq index",
        ),
    ] {
        let mut cmd = vlc();
        cmd.args(["build", "--backend", "cpu", "-q"]);
        if !args.contains(&"--bytes-per-vector") {
            cmd.args(["--bytes-per-vector", "33"]);
        }
        cmd.args(args)
            .arg(s.p("base.npy"))
            .arg("-o")
            .arg(&index)
            .assert()
            .failure()
            .stderr(predicate::str::contains(why));
        assert_eq!(std::fs::metadata(&index).unwrap().len(), size, "{args:?}");
    }
    for bad in ["pcaq:xB", "sq8:40B", "pcaq:-4B"] {
        vlc()
            .args(["bench", "--configs", bad, "--out"])
            .arg(s.p("bad"))
            .arg("--base")
            .arg(s.p("base.npy"))
            .args(s.truth_args())
            .assert()
            .failure()
            .stderr(predicate::str::contains("pcaq:NB"));
    }
}

/// An int32 `.npy` (rows, cols) read back as i64.
fn read_ids_npy(path: &Path) -> Vec<i64> {
    vlc::io::read_ids(path).unwrap().data
}

#[test]
fn groundtruth_is_exact_and_feeds_eval_and_bench() {
    let s = Set::new();
    let gt = s.p("computed.npy");
    vlc()
        .args(["groundtruth", "-k", "20", "-q"])
        .arg(s.p("base.npy"))
        .arg(s.p("queries.npy"))
        .arg("-o")
        .arg(&gt)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "exact 20 nearest neighbours (l2) of 50 queries among 2000",
        ));
    // The same neighbours as the test's own exact search (the set's gt.npy), and distances
    // that are the squared L2 distances of those rows, nearest first.
    let want: Vec<i64> = read_ids_npy(&s.p("gt.npy"))
        .chunks_exact(100)
        .flat_map(|r| r[..20].to_vec())
        .collect();
    assert_eq!(read_ids_npy(&gt), want);
    let data = clustered(2000, DIM, 16, 0.5, 1);
    let queries = queries_near(&data, DIM, 50, 0.2, 2);
    let dists = vlc::io::read_vectors(&s.p("computed.distances.npy"), Some(20)).unwrap();
    for (q, (ids, ds)) in want
        .chunks_exact(20)
        .zip(dists.data.chunks_exact(20))
        .enumerate()
    {
        for (&i, &d) in ids.iter().zip(ds) {
            let exact: f64 = queries[q * DIM..(q + 1) * DIM]
                .iter()
                .zip(&data[i as usize * DIM..(i as usize + 1) * DIM])
                .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
                .sum();
            assert!(
                (d as f64 - exact).abs() <= 1e-5 * exact.max(1.0),
                "{d} vs {exact}"
            );
        }
        assert!(ds.windows(2).all(|w| w[0] <= w[1]));
    }
    // .ivecs holds the same ids.
    let ivecs = s.p("computed.ivecs");
    vlc()
        .args(["groundtruth", "-k", "20", "-q"])
        .arg(s.p("base.npy"))
        .arg(s.p("queries.npy"))
        .arg("-o")
        .arg(&ivecs)
        .assert()
        .success();
    assert_eq!(vlc::io::read_ids(&ivecs).unwrap().data, want);
    // On a GPU the GEMM only picks candidates: the same ids. (On lavapipe, which cuts shader
    // loops past 65,535 iterations short, its candidates are caught and measured in full.)
    let gpu = s.p("gpu.npy");
    let out = vlc()
        .args(["groundtruth", "-k", "20", "--json", "--backend", "wgpu"])
        .arg(s.p("base.npy"))
        .arg(s.p("queries.npy"))
        .arg("-o")
        .arg(&gpu)
        .output()
        .unwrap();
    if out.status.success() {
        assert_eq!(read_ids_npy(&gpu), want);
        // k 200 takes 258 candidates per block, more than WGPU's radix selection handles:
        // the CPU ranks, says so, and the ids are the CPU's.
        let (on_cpu, on_wgpu) = (s.p("k200_cpu.npy"), s.p("k200_wgpu.npy"));
        for (backend, path) in [("cpu", &on_cpu), ("wgpu", &on_wgpu)] {
            let out = vlc()
                .args(["groundtruth", "-k", "200", "-q", "--backend", backend])
                .arg(s.p("base.npy"))
                .arg(s.p("queries.npy"))
                .arg("-o")
                .arg(path)
                .assert()
                .success();
            let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
            assert_eq!(
                err.contains("the CPU ranked the blocks"),
                backend == "wgpu",
                "{err}"
            );
        }
        assert_eq!(read_ids_npy(&on_wgpu), read_ids_npy(&on_cpu));
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--backend wgpu"), "{err}");
        println!("SKIPPED groundtruth --backend wgpu: no adapter ({err})");
    }

    // `vlc eval --base` computes the same truth as `--groundtruth` gives.
    let index = s.p("i.vlc");
    vlc()
        .args(["build", "--codec", "rabitq1", "--refine", "sq8", "-q"])
        .arg(s.p("base.npy"))
        .arg("-o")
        .arg(&index)
        .assert()
        .success();
    let from_file = eval_json(&s, &index, "4,16", &[]);
    let out = vlc()
        .args(["eval", "--nprobe", "4,16", "--json", "--queries"])
        .arg(s.p("queries.npy"))
        .arg("--base")
        .arg(s.p("base.npy"))
        .arg(&index)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let from_base: serde_json::Value = serde_json::from_slice(&out).unwrap();
    for (a, b) in from_file["results"]
        .as_array()
        .unwrap()
        .iter()
        .zip(from_base["results"].as_array().unwrap())
    {
        for r in ["recall@1", "recall@10", "recall@100"] {
            assert_eq!(a[r], b[r], "{r}");
        }
    }

    // `vlc bench` on a directory without ground truth computes it and writes it.
    let dir = s.p("set");
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(s.p("base.npy"), dir.join("base.npy")).unwrap();
    std::fs::copy(s.p("queries.npy"), dir.join("queries.npy")).unwrap();
    let out = s.p("bench-out");
    vlc()
        .args([
            "bench",
            "--configs",
            "rabitq1",
            "--nprobe",
            "16",
            "--repeat",
            "1",
        ])
        .args(["--rerank", "0", "--probe-margin", "1"])
        .arg(&dir)
        .arg("--out")
        .arg(&out)
        .assert()
        .success()
        .stderr(predicate::str::contains("no ground truth given"));
    assert_eq!(
        read_ids_npy(&out.join("groundtruth.npy")),
        read_ids_npy(&s.p("gt.npy"))
    );
}

#[test]
fn groundtruth_and_eval_from_base_name_bad_input() {
    let s = Set::new();
    let run = |args: &[&str], base: &Path, queries: &Path| {
        vlc()
            .arg("groundtruth")
            .args(args)
            .arg(base)
            .arg(queries)
            .assert()
            .failure()
    };
    let (base, queries) = (s.p("base.npy"), s.p("queries.npy"));
    run(&["-o", "x.npy", "-k", "0"], &base, &queries).stderr(predicate::str::contains("-k 0"));
    run(&["-o", "x.txt"], &base, &queries).stderr(predicate::str::contains(".npy or .ivecs"));
    let other = s.p("other.npy");
    write_f32(&other, 3, DIM + 1, &vec![0.5; 3 * (DIM + 1)]);
    let out = s.p("x.npy");
    let out = out.to_str().unwrap();
    run(&["-o", out], &base, &other).stderr(predicate::str::contains("dimension"));
    let mut data = clustered(2000, DIM, 16, 0.5, 1);
    data[1234 * DIM + 5] = f32::NAN;
    let bad = s.p("bad.npy");
    write_f32(&bad, 2000, DIM, &data);
    run(&["-o", out], &bad, &queries)
        .stderr(predicate::str::contains("row 1234").and(predicate::str::contains("column 5")));
    assert!(!Path::new(out).exists(), "no output after an error");

    // eval: --groundtruth or --base, not both, and --base only for an index of exactly its rows.
    let index = s.p("i.vlc");
    vlc()
        .args(["build", "--codec", "sq8", "-q"])
        .arg(&base)
        .arg("-o")
        .arg(&index)
        .assert()
        .success();
    vlc()
        .arg("eval")
        .arg(&index)
        .args(s.truth_args())
        .arg("--base")
        .arg(&base)
        .assert()
        .failure()
        .stderr(predicate::str::contains("cannot be used with"));
    vlc()
        .arg("eval")
        .arg(&index)
        .arg("--queries")
        .arg(&queries)
        .assert()
        .failure()
        .stderr(predicate::str::contains("--groundtruth").and(predicate::str::contains("--base")));
    vlc()
        .args(["remove", "--ids", "7"])
        .arg(&index)
        .assert()
        .success();
    vlc()
        .arg("eval")
        .arg(&index)
        .arg("--queries")
        .arg(&queries)
        .arg("--base")
        .arg(&base)
        .assert()
        .failure()
        .stderr(predicate::str::contains("holds 1999 vectors"));
    // A ground truth of another base (an id past the index's, at query 3, column 2), and one
    // of too few rows, in eval and in bench; -1 (no neighbour) is accepted as padding.
    let mut ids = vec![0i32; 50 * 10];
    ids[3 * 10 + 2] = 2000;
    ids[4 * 10 + 9] = -1;
    let body: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(s.p("other_gt.npy"), npy_bytes(NpyType::I32, 50, 10, &body)).unwrap();
    std::fs::write(
        s.p("short_gt.npy"),
        npy_bytes(NpyType::I32, 5, 10, &body[..5 * 40]),
    )
    .unwrap();
    for (gt, message) in [
        ("other_gt.npy", "names id 2000 (query 3, column 2)"),
        ("short_gt.npy", "has 5 rows but there are 50 queries"),
    ] {
        vlc()
            .arg("eval")
            .arg(&index)
            .arg("--queries")
            .arg(&queries)
            .arg("--groundtruth")
            .arg(s.p(gt))
            .assert()
            .failure()
            .stderr(predicate::str::contains(message));
        vlc()
            .arg("bench")
            .arg("--base")
            .arg(&base)
            .arg("--queries")
            .arg(&queries)
            .arg("--groundtruth")
            .arg(s.p(gt))
            .arg("--out")
            .arg(s.p("bench_out"))
            .assert()
            .failure()
            .stderr(predicate::str::contains(message));
    }
}
