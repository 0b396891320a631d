//! Codecs: scan estimates agree with decoded residuals, parameters round-trip, sizes hold.

use vlc::codec::{
    Codec, CodecKind, CodecParams, FactorFormat, QueryState, ResidualCodec, ResidualSpread,
};
use vlc::linalg::l2_sq;
use vlc::synthetic::clustered;
use vlc::{Backend, CpuBackend};

struct Fixture {
    dim: usize,
    data: Vec<f32>,
    anchors: Vec<f32>,
    assignment: Vec<u32>,
}

fn fixture(dim: usize) -> Fixture {
    let n = 600;
    let data = clustered(n, dim, 8, 0.4, dim as u64);
    let anchors: Vec<f32> = data[..8 * dim].to_vec();
    fixture_from(dim, data, anchors)
}

/// `data` (n, dim) assigned to its nearest `anchors` (num_anchors, dim).
fn fixture_from(dim: usize, data: Vec<f32>, anchors: Vec<f32>) -> Fixture {
    let assignment = CpuBackend
        .nearest_anchors(&data, &anchors, dim, 1)
        .unwrap()
        .ids;
    Fixture {
        dim,
        data,
        anchors,
        assignment,
    }
}

fn encode(f: &Fixture, codec: &Codec) -> Vec<u8> {
    let mut codes = vec![0u8; f.assignment.len() * codec.code_size()];
    codec.encode(&f.data, &f.anchors, &f.assignment, &mut codes);
    codes
}

fn estimates(f: &Fixture, codec: &Codec, codes: &[u8], query: &[f32]) -> Vec<f32> {
    let mut state = QueryState {
        query: query.to_vec(),
        ..Default::default()
    };
    codec.prepare_query(&mut state);
    let cs = codec.code_size();
    (0..f.assignment.len())
        .map(|i| {
            let a = f.assignment[i];
            let qa = l2_sq(
                query,
                &f.anchors[a as usize * f.dim..(a as usize + 1) * f.dim],
            );
            let mut out = [0f32];
            codec.scan(&mut state, a, qa, &codes[i * cs..(i + 1) * cs], &mut out);
            out[0]
        })
        .collect()
}

#[test]
fn grid_estimates_equal_distance_to_decoded_vector() {
    for &dim in &[1usize, 7, 65, 384] {
        let f = fixture(dim);
        for kind in [
            CodecKind::Sq8,
            CodecKind::Sq4,
            CodecKind::F16,
            CodecKind::F32,
        ] {
            for jacobian in [false, true] {
                if matches!(kind, CodecKind::F16 | CodecKind::F32) && jacobian {
                    continue;
                }
                let p = CodecParams {
                    jacobian,
                    seed: 1,
                    ..Default::default()
                };
                let codec =
                    Codec::train(kind, &p, &f.data, &f.anchors, &f.assignment, dim).unwrap();
                assert_eq!(Some(codec.code_size()), kind.code_size(dim));
                let codes = encode(&f, &codec);
                let query = &f.data[dim * 3..dim * 4];
                let est = estimates(&f, &codec, &codes, query);
                let mut rhat = vec![0f32; dim];
                let mut worst = 0f64;
                let mut mean_truth = 0f64;
                for i in 0..f.assignment.len() {
                    let a = f.assignment[i] as usize;
                    codec.decode(
                        &codes[i * codec.code_size()..(i + 1) * codec.code_size()],
                        a as u32,
                        &mut rhat,
                    );
                    let recon: Vec<f32> = rhat
                        .iter()
                        .zip(&f.anchors[a * dim..(a + 1) * dim])
                        .map(|(r, c)| r + c)
                        .collect();
                    let want = l2_sq(query, &recon) as f64;
                    assert!(
                        (est[i] as f64 - want).abs() < 1e-3 * (1.0 + want),
                        "{kind} dim {dim}: {} vs {want}",
                        est[i]
                    );
                    let truth = l2_sq(query, &f.data[i * dim..(i + 1) * dim]) as f64;
                    worst = worst.max((want.sqrt() - truth.sqrt()).abs());
                    mean_truth += truth / f.assignment.len() as f64;
                }
                // Every distance within 1% (8-bit codes), 0.1% (half floats) or 10⁻⁵
                // (single floats: only f32 arithmetic's rounding) of the typical distance.
                let tolerance = match kind {
                    CodecKind::Sq8 => 0.01,
                    CodecKind::F16 => 0.001,
                    CodecKind::F32 => 1e-5,
                    _ => f64::INFINITY,
                };
                assert!(
                    worst < tolerance * mean_truth.sqrt(),
                    "{kind} dim {dim}: distance off by {worst}, typical {}",
                    mean_truth.sqrt()
                );
            }
        }
    }
}

const RABITQ: [CodecKind; 8] = [
    CodecKind::RaBitQ1,
    CodecKind::RaBitQ2,
    CodecKind::RaBitQ3,
    CodecKind::RaBitQ4,
    CodecKind::RaBitQ5,
    CodecKind::RaBitQ6,
    CodecKind::RaBitQ7,
    CodecKind::RaBitQ8,
];

fn train(f: &Fixture, kind: CodecKind) -> Codec {
    Codec::train(
        kind,
        &CodecParams::default(),
        &f.data,
        &f.anchors,
        &f.assignment,
        f.dim,
    )
    .unwrap()
}

/// The RaBitQ family: the eight fixed widths and `pcaq` (default 3 bits per dimension).
const RABITQ_FAMILY: [CodecKind; 9] = [
    CodecKind::RaBitQ1,
    CodecKind::RaBitQ2,
    CodecKind::RaBitQ3,
    CodecKind::RaBitQ4,
    CodecKind::RaBitQ5,
    CodecKind::RaBitQ6,
    CodecKind::RaBitQ7,
    CodecKind::RaBitQ8,
    CodecKind::PcaRaBitQ,
];

#[test]
fn rabitq_estimate_is_unbiased_and_ranks_well() {
    for (kind, &dim) in RABITQ_FAMILY
        .into_iter()
        .flat_map(|k| [7usize, 65, 384].iter().map(move |d| (k, d)))
    {
        let f = fixture(dim);
        let codec = train(&f, kind);
        let nb = dim.div_ceil(8);
        // Data near the origin (as here): the first stage's factors are a byte each (a
        // coarse code's error dwarfs their rounding); the full code's one or two bytes each.
        let (stage1, full) = codec.factor_formats().unwrap();
        assert!(
            matches!(stage1, FactorFormat::U8 { .. }),
            "{kind} dim {dim}"
        );
        let full_bytes = full.map_or(0, |f| f.bytes());
        assert!(
            [0, 2, 4].contains(&full_bytes),
            "{kind} dim {dim}: {full:?}"
        );
        if let Some(bits) = kind.rabitq_bits() {
            assert_eq!(full.is_some(), bits > 1);
            let extended = (bits as usize - 1) * nb + full_bytes;
            assert_eq!(codec.code_size(), nb + 2 + extended);
        } else {
            // pcaq at 3 bits: 3·D/8 bytes (rounded) of bit planes and two factor pairs.
            let bytes = (3.0 * dim as f64 / 8.0).round() as usize;
            assert_eq!(
                codec.code_size(),
                bytes + 2 + full_bytes,
                "{kind} dim {dim}"
            );
        }
        let codes = encode(&f, &codec);
        let mut bias = 0f64;
        let mut count = 0usize;
        for q in 0..5 {
            let query = &f.data[(100 + q) * dim..(101 + q) * dim];
            let est = estimates(&f, &codec, &codes, query);
            for (i, &e) in est.iter().enumerate().take(f.assignment.len()) {
                let truth = l2_sq(query, &f.data[i * dim..(i + 1) * dim]) as f64;
                bias += e as f64 - truth;
                count += 1;
            }
            // The point itself must rank near the top of its own estimate list.
            let me = est[100 + q];
            let better = est.iter().filter(|&&e| e < me).count();
            assert!(
                better < f.assignment.len() / 10,
                "{kind} dim {dim}: self ranks {better}"
            );
        }
        let mean_truth: f64 = (0..f.assignment.len())
            .map(|i| l2_sq(&f.data[..dim], &f.data[i * dim..(i + 1) * dim]) as f64)
            .sum::<f64>()
            / f.assignment.len() as f64;
        assert!(
            (bias / count as f64).abs() < 0.1 * mean_truth,
            "{kind} dim {dim}: mean bias {} vs mean distance {mean_truth}",
            bias / count as f64
        );
    }
}

/// Mean squared error of the distance estimates over a few queries.
fn estimate_error(f: &Fixture, codec: &Codec) -> f64 {
    let codes = encode(f, codec);
    let dim = f.dim;
    let mut sum = 0f64;
    let mut count = 0usize;
    for q in 0..5 {
        let query = &f.data[(200 + q) * dim..(201 + q) * dim];
        for (i, e) in estimates(f, codec, &codes, query).into_iter().enumerate() {
            let truth = l2_sq(query, &f.data[i * dim..(i + 1) * dim]) as f64;
            sum += (e as f64 - truth).powi(2);
            count += 1;
        }
    }
    sum / count as f64
}

#[test]
fn more_rabitq_bits_give_smaller_errors() {
    for dim in [65usize, 384] {
        let f = fixture(dim);
        let errors: Vec<f64> = RABITQ
            .iter()
            .map(|&k| estimate_error(&f, &train(&f, k)))
            .collect();
        for w in errors.windows(2) {
            // Each extra bit should cut the error substantially (about 4x in theory).
            assert!(w[1] < 0.6 * w[0], "dim {dim}: errors {errors:?}");
        }
    }
}

/// The fast-scan pass reads the first ⌈D/8⌉ bytes and the two factors of every RaBitQ code as
/// a 1-bit code: they must be exactly the 1-bit code of the same vector.
#[test]
fn multi_bit_codes_start_with_the_one_bit_code() {
    let dim = 65;
    let f = fixture(dim);
    let rabitq1 = train(&f, CodecKind::RaBitQ1);
    let one = encode(&f, &rabitq1);
    let head = dim.div_ceil(8) + rabitq1.fast_scan_bytes().unwrap().1.bytes();
    assert_eq!(head, rabitq1.code_size());
    for kind in &RABITQ[1..] {
        let codec = train(&f, *kind);
        let codes = encode(&f, &codec);
        let cs = codec.code_size();
        for i in 0..f.assignment.len() {
            assert_eq!(
                &codes[i * cs..i * cs + head],
                &one[i * head..(i + 1) * head],
                "{kind} row {i}"
            );
        }
    }
}

/// Scan and decode read the same code layout: the estimate is
/// `‖q − c − r̂‖² − ‖r̂‖² + ‖r‖²` with `r̂` the decoded residual and `r` the true one.
#[test]
fn rabitq_scan_agrees_with_decode() {
    for (kind, dim) in RABITQ_FAMILY
        .into_iter()
        .flat_map(|k| [7usize, 65].map(|d| (k, d)))
    {
        let f = fixture(dim);
        let codec = train(&f, kind);
        // The estimate uses the finest grid's f1 as stored (the first stage's for rabitq1,
        // the full code's otherwise): its rounding is not in the decoded vector (see
        // `f1_rounding`). pcaq's rotation is orthonormal (its stored rows are
        // orthonormalised when read), so it needs no more slack.
        assert_scan_agrees_with_decode(&f, &codec, &format!("{kind} dim {dim}"), |r_sq, c| {
            (c + r_sq.sqrt()).powi(2)
        });
    }
}

/// Half a step of the stored f1 values of `codec`'s 8-bit factor formats (0 for wider
/// formats): the rounding of f1, which the decoded residual does not carry (f2 it does: f1's
/// cross term with the anchor is taken with f2 as stored).
fn f1_rounding(codec: &Codec) -> f32 {
    let formats = match codec {
        Codec::RaBitQ(r) => [r.factors(), r.full_factors()],
        Codec::Pca(p) => [p.factors(), p.full_factors()],
        _ => return 0.0,
    };
    formats
        .iter()
        .map(|f| match f {
            FactorFormat::U8 { f1, .. } => 0.5 * f1.step(8),
            FactorFormat::U16 { f1, .. } => 0.5 * f1.step(16),
            _ => 0.0,
        })
        .fold(0.0, f32::max)
}

/// Scan and decode read the same code layout: for every code of `f`, the scanned estimate is
/// `‖q − c − r̂‖² − ‖r̂‖² + ‖r‖²` (with `r̂` the decoded residual and `r` the true one) to 1e-3
/// of `1 + |value| + slack(‖r‖², ‖c‖)`, plus the rounding of an 8-bit f1 ([`f1_rounding`]).
fn assert_scan_agrees_with_decode(
    f: &Fixture,
    codec: &Codec,
    label: &str,
    slack: impl Fn(f32, f32) -> f32,
) {
    let dim = f.dim;
    let codes = encode(f, codec);
    let cs = codec.code_size();
    let query = &f.data[300 * dim..301 * dim];
    let est = estimates(f, codec, &codes, query);
    let rounding = f1_rounding(codec);
    let mut decoded = vec![0f32; dim];
    for i in 0..f.assignment.len() {
        let a = f.assignment[i] as usize;
        let anchor = &f.anchors[a * dim..(a + 1) * dim];
        codec.decode(&codes[i * cs..(i + 1) * cs], a as u32, &mut decoded);
        let x = &f.data[i * dim..(i + 1) * dim];
        let r_sq: f32 = x.iter().zip(anchor).map(|(x, c)| (x - c).powi(2)).sum();
        let rhat_sq: f32 = decoded.iter().map(|v| v * v).sum();
        let recon: Vec<f32> = anchor.iter().zip(&decoded).map(|(c, r)| c + r).collect();
        let expected = l2_sq(query, &recon) - rhat_sq + r_sq;
        let c_norm = l2_sq(anchor, &vec![0.0; dim]).sqrt();
        assert!(
            (est[i] - expected).abs()
                < 1e-3 * (1.0 + expected.abs() + slack(r_sq, c_norm)) + rounding,
            "{label} row {i}: scan {} vs decode {expected}",
            est[i]
        );
    }
}

#[test]
fn params_round_trip_and_reject_garbage() {
    let f = fixture(65);
    for kind in CodecKind::ALL {
        let codec = Codec::train(
            kind,
            &CodecParams::default(),
            &f.data,
            &f.anchors,
            &f.assignment,
            65,
        )
        .unwrap();
        let mut bytes = Vec::new();
        codec.write_params(&mut bytes);
        let back = Codec::read_params(kind, 65, 8, &bytes).unwrap();
        assert_eq!(encode(&f, &codec), encode(&f, &back), "{kind}");
        if !bytes.is_empty() {
            assert!(Codec::read_params(kind, 65, 8, &bytes[..bytes.len() - 1]).is_err());
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(Codec::read_params(kind, 65, 8, &longer).is_err());
        }
    }
    assert!(Codec::read_params(CodecKind::F16, 65, 8, &[0]).is_err());
    assert!(Codec::train(
        CodecKind::RaBitQ1,
        &CodecParams {
            jacobian: true,
            seed: 1,
            ..Default::default()
        },
        &f.data,
        &f.anchors,
        &f.assignment,
        65
    )
    .is_err());
}

#[test]
fn codec_names_parse() {
    for kind in CodecKind::ALL {
        assert_eq!(kind.name().parse::<CodecKind>().unwrap(), kind);
        assert_eq!(CodecKind::from_u8(kind as u8), Some(kind));
    }
    assert!("pq8".parse::<CodecKind>().is_err());
    use vlc::codec::parse_codec_spec;
    assert_eq!(
        parse_codec_spec("pcaq3.2").unwrap(),
        (CodecKind::PcaRaBitQ, Some(3.2))
    );
    assert_eq!(
        parse_codec_spec("PCAQ").unwrap(),
        (CodecKind::PcaRaBitQ, None)
    );
    assert_eq!(
        parse_codec_spec("rabitq2").unwrap(),
        (CodecKind::RaBitQ2, None)
    );
    assert_eq!(
        parse_codec_spec("pcaq0.75").unwrap(),
        (CodecKind::PcaRaBitQ, Some(0.75))
    );
    for bad in ["pcaq0", "pcaq9", "pcaqx", "pcaq-2", "rabitq9"] {
        let e = parse_codec_spec(bad).unwrap_err().to_string();
        assert!(e.contains("codec"), "{bad}: {e}");
    }
}

/// Anisotropic data, as real embeddings are: Gaussian clusters whose spread falls off
/// geometrically over the dimensions (so half the variance sits in a few of them).
fn anisotropic_fixture(dim: usize, n: usize) -> Fixture {
    let mut rng = vlc::Rng::new(11);
    let centres: Vec<f32> = (0..8 * dim).map(|_| rng.normal() as f32).collect();
    let scale: Vec<f32> = (0..dim).map(|d| (-(d as f32) / 12.0).exp()).collect();
    let data: Vec<f32> = (0..n)
        .flat_map(|i| {
            let c = i % 8;
            let row: Vec<f32> = (0..dim)
                .map(|d| centres[c * dim + d] + scale[d] * rng.normal() as f32)
                .collect();
            row
        })
        .collect();
    fixture_from(dim, data, centres)
}

/// On anisotropic residuals the variance-allocated code beats the evenly spread one at no
/// more bytes per code: pcaq at 2.75 bits against rabitq3.
#[test]
fn pcaq_beats_rabitq3_per_byte_on_anisotropic_data() {
    let f = anisotropic_fixture(64, 2000);
    let rabitq3 = train(&f, CodecKind::RaBitQ3);
    let pcaq = Codec::train(
        CodecKind::PcaRaBitQ,
        &CodecParams {
            bits: 2.75,
            ..Default::default()
        },
        &f.data,
        &f.anchors,
        &f.assignment,
        f.dim,
    )
    .unwrap();
    assert!(
        pcaq.code_size() <= rabitq3.code_size(),
        "{} vs {}",
        pcaq.code_size(),
        rabitq3.code_size()
    );
    let (e_pcaq, e_rabitq3) = (estimate_error(&f, &pcaq), estimate_error(&f, &rabitq3));
    assert!(
        e_pcaq < 0.7 * e_rabitq3,
        "pcaq error {e_pcaq} vs rabitq3 {e_rabitq3}"
    );
}

/// Residuals whose 8 leading dimensions have 64 times the spread of the other 56, as where a
/// few latent factors carry most of the variance: at 4 to 7 bits per dimension water-filling
/// wants those axes about 6 bits wider than the rest, past 8 bits. One grid step serves every
/// axis of a code, so were the leading axes held at 8 bits they would set a step too coarse
/// for the others' bits and the error would stop falling with the rate (it did, up to format
/// version 7). They get their widths, and each bit per dimension cuts the error about 4x.
#[test]
fn pcaq_error_keeps_falling_where_leading_axes_need_more_than_8_bits() {
    let (dim, n, lead) = (64usize, 2000usize, 8usize);
    let mut rng = vlc::Rng::new(12);
    let centres: Vec<f32> = (0..8 * dim).map(|_| rng.normal() as f32).collect();
    let data: Vec<f32> = (0..n * dim)
        .map(|k| {
            let (i, d) = (k / dim, k % dim);
            let spread = if d < lead { 1.0 } else { 1.0 / 64.0 };
            centres[(i % 8) * dim + d] + spread * rng.normal() as f32
        })
        .collect();
    let f = fixture_from(dim, data, centres);
    let mut errors = Vec::new();
    for bits in [4.0f32, 5.0, 6.0, 7.0] {
        let codec = train_pcaq(&f, bits).unwrap();
        let Codec::Pca(p) = &codec else {
            unreachable!()
        };
        let widths = p.dim_bits();
        assert!(
            widths[0] > 8 && widths[0] >= widths[lead] + 5,
            "{bits} bits: {widths:?}"
        );
        errors.push(estimate_error(&f, &codec));
    }
    for w in errors.windows(2) {
        assert!(w[1] < 0.5 * w[0], "errors {errors:?}");
    }
}

/// `pcaq` at `bits` per dimension on the fixture.
fn train_pcaq(f: &Fixture, bits: f32) -> vlc::Result<Codec> {
    let params = CodecParams {
        bits,
        ..Default::default()
    };
    Codec::train(
        CodecKind::PcaRaBitQ,
        &params,
        &f.data,
        &f.anchors,
        &f.assignment,
        f.dim,
    )
}

#[test]
fn pcaq_rejects_bits_out_of_range() {
    let f = fixture(16);
    for bits in [0.0f32, -1.0, 8.5, f32::NAN] {
        let e = train_pcaq(&f, bits).unwrap_err();
        assert!(e.to_string().contains("bits"), "{bits}: {e}");
    }
}

/// The factors are 8- or 16-bit for data near the origin, f32 where anchors are much longer
/// than residuals; every format reads back what was written (8- and 16-bit to half a step of
/// the fitted range), older formats (f16 in versions 2 to 5, f32 in version 1) still read,
/// and parameters written before the format existed read as f32.
#[test]
fn factor_format_follows_the_data_and_round_trips() {
    let dim = 32;
    let f = fixture(dim);
    assert!(ResidualSpread::measure(&f.data, &f.anchors, &f.assignment, dim).compact);
    let far = fixture_from(
        dim,
        f.data.iter().map(|v| v + 1000.0).collect(),
        f.anchors.iter().map(|v| v + 1000.0).collect(),
    );
    assert!(!ResidualSpread::measure(&far.data, &far.anchors, &far.assignment, dim).compact);
    let far_codec = train(&far, CodecKind::RaBitQ2);
    assert_eq!(far_codec.fast_scan_bytes().unwrap().1, FactorFormat::F32);
    let pairs = [(1.2345f32, -0.5f32), (-37.0, 1e-3), (0.0, 0.0)];
    let f16 = FactorFormat::F16 {
        f1_scale: 0.5,
        f2_scale: 1.0,
    };
    let (u8, u16) = (
        FactorFormat::fitted(8, &pairs),
        FactorFormat::fitted(16, &pairs),
    );
    for format in [u8, u16, f16, FactorFormat::F32] {
        let mut bytes = [0u8; 8];
        for (f1, f2) in pairs {
            format.write(&mut bytes, f1, f2);
            let (g1, g2) = format.read(&bytes);
            let tolerance = match format {
                FactorFormat::U8 { f1, f2 } => (0.5001 * f1.step(8), 0.5001 * f2.step(8)),
                FactorFormat::U16 { f1, f2 } => (0.5001 * f1.step(16), 0.5001 * f2.step(16)),
                _ => (0.0, 0.0),
            };
            assert!(
                (g1 - f1).abs() <= 1e-3 * f1.abs() + tolerance.0,
                "{format:?}: {g1} vs {f1}"
            );
            assert!(
                (g2 - f2).abs() <= 1e-3 * f2.abs() + tolerance.1,
                "{format:?}: {g2} vs {f2}"
            );
        }
    }
    // A rabitq codec's parameters: seed, then the first stage's and the full code's factor
    // formats. Without the second (before format version 4): f32 full-code factors; without
    // either (version 1): f32 factors throughout.
    let codec = train(&f, CodecKind::RaBitQ2);
    let (stage1, full) = codec.factor_formats().unwrap();
    let full = full.unwrap();
    assert!(matches!(stage1, FactorFormat::U8 { .. }), "{stage1:?}");
    let mut params = Vec::new();
    codec.write_params(&mut params);
    assert_eq!(params.len(), 8 + 2 * (1 + 16));
    let v3 = Codec::read_params(CodecKind::RaBitQ2, dim, 8, &params[..8 + 17]).unwrap();
    assert_eq!(v3.fast_scan_bytes().unwrap().1, stage1);
    assert_eq!(v3.code_size(), codec.code_size() + 8 - full.bytes());
    let old = Codec::read_params(CodecKind::RaBitQ2, dim, 8, &params[..8]).unwrap();
    assert_eq!(old.fast_scan_bytes().unwrap().1, FactorFormat::F32);
    assert_eq!(
        old.code_size(),
        codec.code_size() + 16 - stage1.bytes() - full.bytes()
    );
    let mut bad = params.clone();
    bad[8] = 7;
    assert!(Codec::read_params(CodecKind::RaBitQ2, dim, 8, &bad).is_err());
    let mut bad = params.clone();
    bad[9..13].copy_from_slice(&f32::NAN.to_le_bytes());
    assert!(Codec::read_params(CodecKind::RaBitQ2, dim, 8, &bad).is_err());
}

/// `pcaq` may leave principal axes uncoded at any rate: the rotation keeps only the coded
/// axes' rows, the code holds `round(bits · D/8)` bytes of bit planes and two factor pairs (or,
/// single-stage, one bit on the leading axes in the same size and one factor pair), and the
/// estimate still agrees with the decoded residual (whose energy outside the coded axes enters
/// `‖r‖²` only).
#[test]
fn pcaq_codes_a_prefix_of_the_axes_at_any_rate() {
    for (dim, bits) in [
        (65usize, 0.75f32),
        (32, 1.0),
        (7, 0.5),
        (65, 2.0),
        (96, 0.25),
    ] {
        let f = fixture(dim);
        let codec = train_pcaq(&f, bits).unwrap();
        let Codec::Pca(p) = &codec else {
            unreachable!()
        };
        let widths = p.dim_bits();
        assert!(widths.windows(2).all(|w| w[0] >= w[1]), "{widths:?}");
        let active = p.active_dims();
        assert_eq!(active, widths.iter().filter(|&&w| w > 0).count());
        let bytes = (bits as f64 * dim as f64 / 8.0).round().max(1.0) as usize;
        if widths[0] > 1 {
            assert_eq!(codec.code_size(), bytes + 4, "dim {dim} bits {bits}");
        } else {
            assert!(active.div_ceil(8) <= bytes + 2, "dim {dim} bits {bits}");
            assert_eq!(codec.code_size(), active.div_ceil(8) + 2, "dim {dim}");
        }
        let mut params = Vec::new();
        codec.write_params(&mut params);
        // bits, widths, the rotation's tag, its active rows as int8 with an f32 scale each,
        // two factor formats (tag + the ranges of f1 and f2, two f32 each).
        assert_eq!(params.len(), 4 + dim + 1 + active * (dim + 4) + 2 * 17);
        // The basis the codes are taken in is orthonormal (to f32 rounding).
        let rows = p.rotation();
        for i in 0..active {
            for j in 0..active {
                let g: f32 = (0..dim)
                    .map(|d| rows[i * dim + d] * rows[j * dim + d])
                    .sum();
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((g - want).abs() < 1e-5, "dim {dim}: <{i},{j}> = {g}");
            }
        }
        let reread = Codec::read_params(CodecKind::PcaRaBitQ, dim, 8, &params).unwrap();
        assert_eq!(reread.code_size(), codec.code_size());
        let Codec::Pca(back) = &reread else {
            unreachable!()
        };
        assert_eq!(
            back.rotation(),
            p.rotation(),
            "dim {dim}: basis differs once read"
        );
        // A foreign rotation tag, a bad row scale, or a row repeating the one before it (not a
        // basis) are errors, not a codec.
        let tag = 4 + dim;
        let mut bad = params.clone();
        bad[tag] = 7;
        assert!(Codec::read_params(CodecKind::PcaRaBitQ, dim, 8, &bad).is_err());
        let mut bad = params.clone();
        bad[tag + 1..tag + 5].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(Codec::read_params(CodecKind::PcaRaBitQ, dim, 8, &bad).is_err());
        if active >= 2 {
            let (levels, scales) = (tag + 1 + 4 * active, tag + 1);
            let mut bad = params.clone();
            bad.copy_within(scales..scales + 4, scales + 4);
            bad.copy_within(levels..levels + dim, levels + dim);
            let err = Codec::read_params(CodecKind::PcaRaBitQ, dim, 8, &bad).unwrap_err();
            assert!(err.to_string().contains("rotation row 1"), "{err}");
        }
        // 8-bit factors: see `rabitq_scan_agrees_with_decode`.
        assert_scan_agrees_with_decode(&f, &codec, &format!("dim {dim}"), |r_sq, c| {
            (c + r_sq.sqrt()).powi(2)
        });
    }
}

/// Residuals that live in 8 of 64 dimensions plus faint independent noise: `pcaq0.5` spends its
/// bits on those 8 axes, several each, leaves the noise axes uncoded, and ranks far better than
/// `rabitq1`, which spends as many bytes or more evenly.
#[test]
fn pcaq_spends_its_bits_where_the_residuals_are() {
    let (n, dim, latent) = (2000usize, 64usize, 8usize);
    let structure = clustered(n, latent, 4, 1.0, 21);
    let noise = clustered(n, dim, 1, 0.01, 22);
    let data: Vec<f32> = (0..n * dim)
        .map(|k| {
            let (i, d) = (k / dim, k % dim);
            noise[k]
                + if d < latent {
                    structure[i * latent + d]
                } else {
                    0.0
                }
        })
        .collect();
    let anchors: Vec<f32> = data[..4 * dim].to_vec();
    let f = fixture_from(dim, data, anchors);
    let codec = train_pcaq(&f, 0.5).unwrap();
    let Codec::Pca(p) = &codec else {
        unreachable!()
    };
    assert_eq!(p.active_dims(), latent, "{:?}", p.dim_bits());
    assert_eq!(p.dim_bits()[0], 4);
    // 4 bytes of bit planes and two factor pairs (8-bit and, for the fine full code, 8- or
    // 16-bit); rabitq1: 8 bytes of signs and one 8-bit pair.
    let full = codec.factor_formats().unwrap().1.unwrap();
    assert_eq!(codec.code_size(), 4 + 2 + full.bytes());
    let rabitq = train(&f, CodecKind::RaBitQ1);
    assert_eq!(rabitq.code_size(), 10);
    assert!(codec.code_size() <= rabitq.code_size());
    let recall = |codec: &Codec| {
        let codes = encode(&f, codec);
        let mut hits = 0;
        for q in 0..20 {
            let query = &f.data[(1000 + q) * dim..(1001 + q) * dim];
            let exact: Vec<f32> = (0..n)
                .map(|i| l2_sq(query, &f.data[i * dim..(i + 1) * dim]))
                .collect();
            let est = estimates(&f, codec, &codes, query);
            let top = |d: &[f32]| {
                let mut order: Vec<usize> = (0..n).collect();
                order.sort_by(|&a, &b| d[a].total_cmp(&d[b]));
                order.truncate(10);
                order
            };
            let truth = top(&exact);
            hits += top(&est).iter().filter(|i| truth.contains(i)).count();
        }
        hits as f64 / 200.0
    };
    let (pcaq_recall, rabitq_recall) = (recall(&codec), recall(&rabitq));
    assert!(
        pcaq_recall >= 0.8 && pcaq_recall >= rabitq_recall + 0.15,
        "pcaq0.5 {pcaq_recall} vs rabitq1 {rabitq_recall}"
    );
}

/// `estimate_below` gives `scan`'s estimate bit for bit, or `None` only for codes whose
/// estimate is above the limit, whatever the guess; and bit-plane codes do stop early.
#[test]
fn estimate_below_is_scan_or_a_proven_miss() {
    for dim in [37, 64, 200] {
        let f = anisotropic_fixture(dim, 900);
        let mut codecs: Vec<(String, Codec)> = [0.5f32, 3.0, 7.5]
            .iter()
            .map(|&b| (format!("pcaq{b}"), train_pcaq(&f, b).unwrap()))
            .collect();
        for kind in [
            CodecKind::RaBitQ1,
            CodecKind::RaBitQ3,
            CodecKind::RaBitQ4,
            CodecKind::RaBitQ8,
            CodecKind::Sq8,
        ] {
            codecs.push((kind.to_string(), train(&f, kind)));
        }
        for (name, codec) in &codecs {
            let codes = encode(&f, codec);
            let cs = codec.code_size();
            let mut stopped = 0;
            for qi in [3usize, 250, 777] {
                let query: Vec<f32> = f.data[qi * dim..(qi + 1) * dim]
                    .iter()
                    .enumerate()
                    .map(|(d, x)| x + 0.05 * ((d * 7 + qi) % 5) as f32 - 0.1)
                    .collect();
                let full = estimates(&f, codec, &codes, &query);
                let mut sorted = full.clone();
                sorted.sort_by(f32::total_cmp);
                let mut state = QueryState {
                    query: query.clone(),
                    ..Default::default()
                };
                codec.prepare_query(&mut state);
                for limit in [sorted[5], sorted[100], sorted[600], f32::INFINITY] {
                    for (i, &want) in full.iter().enumerate() {
                        let a = f.assignment[i];
                        let qa = l2_sq(&query, &f.anchors[a as usize * dim..][..dim]);
                        let code = &codes[i * cs..(i + 1) * cs];
                        for guess in [want, want + 1.0, limit + 1e-3, f32::NEG_INFINITY] {
                            match codec.estimate_below(&mut state, a, qa, code, limit, guess) {
                                Some(got) => assert_eq!(
                                    got.to_bits(),
                                    want.to_bits(),
                                    "{name} dim {dim}: code {i} gives {got}, scan {want}"
                                ),
                                None => {
                                    assert!(
                                        want > limit,
                                        "{name} dim {dim}: code {i} ({want}) dropped at {limit}"
                                    );
                                    stopped += 1;
                                }
                            }
                        }
                    }
                }
            }
            // Codes of more than one bit plane (all but rabitq1 and sq8) stop early.
            let planes =
                name.starts_with("pcaq") || name.starts_with("rabitq") && name != "rabitq1";
            assert_eq!(
                stopped > 0,
                planes,
                "{name} dim {dim}: {stopped} early stops"
            );
        }
    }
}

/// Vectors far outside the range of the training sample (residuals 10 to 40 times the usual
/// one) store their factors as tail codes rather than clamped ones, so their estimates stay
/// far where they are far: none enters the estimated top 10 of a query at an ordinary vector
/// (a clamped f1 would pull them in), and searched for with themselves, each lone one ranks
/// first among every code and an outlying pair takes the first two places.
#[test]
fn vectors_unlike_the_sample_take_tail_codes_and_still_rank_first() {
    let dim = 32;
    let f = fixture(dim);
    let mut rng = vlc::Rng::new(5);
    let mut data = f.data.clone();
    let base = f.assignment.len();
    for scale in [10.0f32, 20.0, 40.0] {
        let row: Vec<f32> = f.data[..dim]
            .iter()
            .map(|v| v + scale * rng.normal() as f32)
            .collect();
        data.extend(row);
    }
    let far: Vec<f32> = (0..dim).map(|_| 15.0 * rng.normal() as f32).collect();
    for _ in 0..2 {
        let row: Vec<f32> = far.iter().map(|v| v + 0.05 * rng.normal() as f32).collect();
        data.extend(row);
    }
    let g = fixture_from(dim, data, f.anchors.clone());
    for kind in [
        CodecKind::RaBitQ1,
        CodecKind::RaBitQ2,
        CodecKind::RaBitQ4,
        CodecKind::PcaRaBitQ,
    ] {
        // Trained on the fixture alone: the outliers are not in its sample.
        let codec = train(&f, kind);
        let codes = encode(&g, &codec);
        let (at, format) = codec.fast_scan_bytes().unwrap();
        assert!(matches!(format, FactorFormat::U8 { .. }), "{kind}");
        let cs = codec.code_size();
        for q in 0..50 {
            let est = estimates(&g, &codec, &codes, &g.data[q * dim..(q + 1) * dim]);
            let mut order: Vec<usize> = (0..est.len()).collect();
            order.sort_by(|&a, &b| est[a].total_cmp(&est[b]));
            assert!(
                order[..10].iter().all(|&i| i < base),
                "{kind} query {q}: {:?}",
                &order[..10]
            );
        }
        for i in base..base + 5 {
            let f1_code = codes[i * cs + at];
            assert!(
                !(16..=239).contains(&f1_code),
                "{kind} row {i}: f1 code {f1_code}"
            );
            let est = estimates(&g, &codec, &codes, &g.data[i * dim..(i + 1) * dim]);
            let mut order: Vec<usize> = (0..est.len()).collect();
            order.sort_by(|&a, &b| est[a].total_cmp(&est[b]));
            if i < base + 3 {
                assert_eq!(order[0], i, "{kind} row {i}: {:?}", &order[..3]);
            } else {
                let mut top = [order[0], order[1]];
                top.sort_unstable();
                assert_eq!(top, [base + 3, base + 4], "{kind} row {i}");
            }
        }
    }
}

/// A build encodes its rows a block at a time with the anchors prepared once: every codec's
/// codes must not depend on how the rows are split into blocks.
#[test]
fn codes_do_not_depend_on_the_blocks_they_are_encoded_in() {
    for &dim in &[7usize, 65] {
        let f = fixture(dim);
        for kind in [
            CodecKind::AnchorOnly,
            CodecKind::Sq8,
            CodecKind::Sq4,
            CodecKind::F16,
            CodecKind::RaBitQ1,
            CodecKind::RaBitQ3,
            CodecKind::PcaRaBitQ,
        ] {
            let p = CodecParams {
                bits: 1.5,
                ..Default::default()
            };
            let codec = Codec::train(kind, &p, &f.data, &f.anchors, &f.assignment, dim).unwrap();
            let whole = encode(&f, &codec);
            let cs = codec.code_size();
            let prepared = codec.prepare_anchors(&f.anchors);
            let mut blocks = vec![0u8; whole.len()];
            let mut first = 0;
            for rows in [1usize, 130, 7, 300, 162] {
                codec.encode_prepared(
                    &prepared,
                    &f.data[first * dim..(first + rows) * dim],
                    &f.anchors,
                    &f.assignment[first..first + rows],
                    &mut blocks[first * cs..(first + rows) * cs],
                );
                first += rows;
            }
            assert_eq!(first, f.assignment.len());
            assert!(blocks == whole, "{kind} at dim {dim}");
        }
    }
}

/// The choices `vlc build` and the Python package share: defaults, bits in a spec, a budget,
/// and the errors that name the parameter.
#[test]
fn build_params_from_user_choices() {
    use vlc::{BuildParams, CodecKind};
    let default = BuildParams::from_choices(None, None, None).unwrap();
    assert_eq!(default.codec, CodecKind::Sq8);
    assert_eq!(default.refine, None);
    assert_eq!(default.bytes_per_vector, None);

    let pcaq = BuildParams::from_choices(Some("PCAQ1.5"), None, Some("sq8")).unwrap();
    assert_eq!(pcaq.codec, CodecKind::PcaRaBitQ);
    assert_eq!(pcaq.codec_params.bits, 1.5);
    assert_eq!(pcaq.refine, Some(CodecKind::Sq8));

    // A budget alone may keep rabitq5-8; with an explicit pcaq it is pcaq only.
    let budget = BuildParams::from_choices(None, Some(64.0), Some("none")).unwrap();
    assert_eq!(budget.codec, CodecKind::PcaRaBitQ);
    assert_eq!(budget.bytes_per_vector, Some(64.0));
    assert!(!budget.pcaq_only);
    assert!(
        BuildParams::from_choices(Some("pcaq"), Some(64.0), None)
            .unwrap()
            .pcaq_only
    );

    let message = |codec, budget, refine| {
        BuildParams::from_choices(codec, budget, refine)
            .unwrap_err()
            .to_string()
    };
    assert!(message(Some("rabitq1"), Some(64.0), None).contains("`bytes_per_vector`"));
    assert!(message(Some("pcaq2"), Some(64.0), None).contains("not `pcaq2`"));
    assert!(message(None, None, Some("rabitq1")).contains("must be none, f32, f16, sq8 or sq4"));
    assert!(message(None, None, Some("nope")).contains("unknown refine tier `nope`"));
    assert!(message(Some("pq8"), None, None).contains("unknown codec `pq8`"));
    assert!(message(Some("pcaq9"), None, None).contains("at most 8 bits"));
}
