//! Index file: round trip (load and view), rejection of every truncation, of bit flips in the
//! header and section table, of foreign and newer files; files altered with their checksums
//! fixed never panic; atomic saves.

use proptest::prelude::*;
use std::sync::OnceLock;
use vlc::format::{to_bytes, FORMAT_VERSION, HEADER_SIZE};
use vlc::synthetic::{clustered, queries_near};
use vlc::{
    AnchorPrecision, BuildParams, CodecKind, CpuBackend, Index, Metric, SearchParams, SliceSource,
    VlcError,
};

const DIM: usize = 12;

fn small_index(codec: CodecKind, refine: Option<CodecKind>) -> Index {
    let data = clustered(300, DIM, 6, 0.3, 4);
    let params = BuildParams::default()
        .with_codec(codec)
        .with_refine(refine)
        .with_num_anchors(8);
    Index::build(&data, DIM, &params, &CpuBackend, &mut |_| {})
        .unwrap()
        .0
}

fn bytes() -> &'static [u8] {
    static B: OnceLock<Vec<u8>> = OnceLock::new();
    B.get_or_init(|| to_bytes(&small_index(CodecKind::RaBitQ1, Some(CodecKind::Sq8))))
}

#[test]
fn load_and_view_round_trip_every_codec() {
    let dir = tempfile::tempdir().unwrap();
    let queries = queries_near(&clustered(300, DIM, 6, 0.3, 4), DIM, 20, 0.05, 9);
    for codec in CodecKind::ALL {
        for refine in [None, Some(CodecKind::Sq8), Some(CodecKind::Sq4)] {
            let index = small_index(codec, refine);
            let path = dir.path().join(format!("{codec}-{refine:?}.vlc"));
            index.save(&path).unwrap();
            assert_eq!(std::fs::metadata(&path).unwrap().len(), index.file_size());
            let params = SearchParams {
                k: 5,
                nprobe: 3,
                rerank: 20,
                probe_margin: None,
            };
            let want = index.search_batch(&queries, &params, &CpuBackend).unwrap();
            for reopened in [Index::load(&path).unwrap(), Index::view(&path).unwrap()] {
                assert_eq!(reopened.len(), 300);
                assert_eq!(reopened.codec(), codec);
                assert_eq!(reopened.refine_codec(), refine);
                assert_eq!(reopened.anchors(), index.anchors());
                assert_eq!(
                    reopened
                        .search_batch(&queries, &params, &CpuBackend)
                        .unwrap(),
                    want
                );
            }
            // Bytes are a pure function of the index: `save` (written a section at a time)
            // writes what `to_bytes` returns, at the size `file_size` predicts.
            let saved = std::fs::read(&path).unwrap();
            assert_eq!(saved, to_bytes(&index));
            assert_eq!(saved.len() as u64, index.file_size());
            assert_eq!(saved, to_bytes(&Index::load(&path).unwrap()));
        }
    }
}

#[test]
fn every_truncation_is_rejected() {
    let b = bytes();
    for len in 0..b.len() {
        let err = Index::from_bytes(&b[..len]).expect_err("truncated file accepted");
        assert!(
            matches!(
                err,
                VlcError::Truncated { .. }
                    | VlcError::ChecksumMismatch { .. }
                    | VlcError::NotAnIndex { .. }
            ),
            "length {len}: unexpected {err}"
        );
    }
    // One byte too many is rejected as well.
    let mut longer = b.to_vec();
    longer.push(0);
    assert!(Index::from_bytes(&longer).is_err());
}

#[test]
fn foreign_and_newer_files_are_rejected() {
    let err =
        Index::from_bytes(b"\x93NUMPY\x01\x00 this is a numpy file, not an index, padded out...")
            .unwrap_err();
    assert!(matches!(err, VlcError::NotAnIndex { .. }), "{err}");
    let next = FORMAT_VERSION + 1;
    let err = Index::from_bytes(&with_header_field(bytes(), 8, &next.to_le_bytes())).unwrap_err();
    assert!(
        matches!(
            err,
            VlcError::UnsupportedVersion { found, supported } if found == next && supported == FORMAT_VERSION
        ),
        "{err}"
    );
    assert!(err.to_string().contains("newer"));
}

/// `b` with `value` written at header offset `at` and the header checksum fixed.
fn with_header_field(b: &[u8], at: usize, value: &[u8]) -> Vec<u8> {
    let mut out = b.to_vec();
    out[at..at + value.len()].copy_from_slice(value);
    let crc = crc32fast::hash(&out[..60]);
    out[60..64].copy_from_slice(&crc.to_le_bytes());
    out
}

#[test]
fn anchor_flags_need_their_format_version_and_unknown_flags_are_rejected() {
    let b = bytes();
    assert_eq!(b[35], 2, "the default build stores int8 anchors");
    // A version-1 header cannot announce int8 anchors (version 1 had no such flag).
    let err = Index::from_bytes(&with_header_field(b, 8, &1u32.to_le_bytes())).unwrap_err();
    assert!(err.to_string().contains("flags"), "{err}");
    // Nor a version-2 header int4 anchors.
    let int4 = with_header_field(b, 35, &[4]);
    let err = Index::from_bytes(&with_header_field(&int4, 8, &2u32.to_le_bytes())).unwrap_err();
    assert!(err.to_string().contains("flags"), "{err}");
    for flags in [3u8, 6, 8, 0x80] {
        let err = Index::from_bytes(&with_header_field(b, 35, &[flags])).unwrap_err();
        assert!(err.to_string().contains("flags"), "{flags}: {err}");
    }
}

/// `rabitq5`-`8` came with format version 7: a file of an earlier version that names one (as
/// its codec or its refine tier) is corrupt, and says which codec and version; at version 7 the
/// same file opens.
#[test]
fn codecs_need_the_format_version_that_brought_them() {
    let b = to_bytes(&small_index(CodecKind::RaBitQ6, Some(CodecKind::Sq8)));
    assert_eq!(b[33], CodecKind::RaBitQ6 as u8);
    assert!(Index::from_bytes(&b).is_ok());
    let err = Index::from_bytes(&with_header_field(&b, 8, &6u32.to_le_bytes())).unwrap_err();
    assert!(matches!(err, VlcError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("rabitq6"), "{err}");
    assert!(err.to_string().contains("version 7"), "{err}");
    let refine = with_header_field(bytes(), 34, &[CodecKind::RaBitQ8 as u8]);
    let err = Index::from_bytes(&with_header_field(&refine, 8, &5u32.to_le_bytes())).unwrap_err();
    assert!(err.to_string().contains("rabitq8"), "{err}");
}

/// `pcaq` widths above 8 bits came with format version 8: such a file read as version 7 is
/// corrupt, not a codec that the reader would decode with the wrong widths.
#[test]
fn pcaq_widths_above_8_bits_need_format_version_8() {
    // Four dimensions with 64 times the spread of the rest: their axes need the wide widths.
    let data: Vec<f32> = clustered(300, DIM, 6, 0.3, 4)
        .iter()
        .enumerate()
        .map(|(k, &x)| if k % DIM < 4 { 64.0 * x } else { x })
        .collect();
    let mut params = BuildParams::default()
        .with_codec(CodecKind::PcaRaBitQ)
        .with_num_anchors(8);
    params.codec_params.bits = 7.0;
    let index = Index::build(&data, DIM, &params, &CpuBackend, &mut |_| {})
        .unwrap()
        .0;
    let widths = index.pcaq_widths().unwrap();
    assert!(widths[0] > 8, "{widths:?}");
    let b = to_bytes(&index);
    assert!(Index::from_bytes(&b).is_ok());
    let err = Index::from_bytes(&with_header_field(&b, 8, &7u32.to_le_bytes())).unwrap_err();
    assert!(matches!(err, VlcError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("need version 8"), "{err}");
}

/// The centre (`CNTR`) came with format version 9: a file of an earlier version that holds one
/// is corrupt (a reader would search it untranslated); a centre with a non-finite value is
/// corrupt, naming its dimension; files without one have none.
#[test]
fn a_centre_needs_format_version_9_and_finite_values() {
    assert!(Index::from_bytes(bytes()).unwrap().centre().is_none());
    assert!(bytes().chunks_exact(32).all(|e| &e[..4] != b"CNTR"));
    let far: Vec<f32> = clustered(300, DIM, 6, 0.3, 4)
        .iter()
        .map(|&x| x + 1000.0)
        .collect();
    let params = BuildParams::default()
        .with_codec(CodecKind::Sq8)
        .with_num_anchors(8);
    let index = Index::build(&far, DIM, &params, &CpuBackend, &mut |_| {})
        .unwrap()
        .0;
    let b = to_bytes(&index);
    assert_eq!(section_length(&b, b"CNTR"), 4 * DIM as u64);
    assert_eq!(Index::from_bytes(&b).unwrap().centre(), index.centre());
    let err = Index::from_bytes(&with_header_field(&b, 8, &8u32.to_le_bytes())).unwrap_err();
    assert!(matches!(err, VlcError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("needs version 9"), "{err}");
    let nan = with_section_bytes(&b, b"CNTR", 4 * 7, &f32::NAN.to_le_bytes());
    let err = Index::from_bytes(&nan).unwrap_err();
    assert!(matches!(err, VlcError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("dimension 7"), "{err}");
}

#[test]
fn every_anchor_precision_round_trips_with_the_same_answers() {
    let data = clustered(300, DIM, 6, 0.3, 4);
    let queries = queries_near(&data, DIM, 20, 0.05, 9);
    let params = SearchParams {
        k: 5,
        nprobe: 3,
        rerank: 20,
        probe_margin: None,
    };
    let mut sizes = Vec::new();
    for precision in [
        AnchorPrecision::F32,
        AnchorPrecision::F16,
        AnchorPrecision::Int8,
        AnchorPrecision::Int4,
    ] {
        let mut build = BuildParams::default()
            .with_codec(CodecKind::RaBitQ2)
            .with_num_anchors(8);
        build.anchor_precision = precision;
        let (index, _) = Index::build(&data, DIM, &build, &CpuBackend, &mut |_| {}).unwrap();
        assert_eq!(index.anchor_precision(), precision);
        let reopened = Index::from_bytes(&to_bytes(&index)).unwrap();
        assert_eq!(reopened.anchor_precision(), precision);
        assert_eq!(reopened.anchors(), index.anchors());
        let want = index.search_batch(&queries, &params, &CpuBackend).unwrap();
        let got = reopened
            .search_batch(&queries, &params, &CpuBackend)
            .unwrap();
        assert_eq!(got, want, "{precision}");
        // The anchor section's length (the file's also holds the build report, whose timings
        // vary in length).
        sizes.push(section_length(&to_bytes(&index), b"ANCH"));
    }
    // f32 > f16 > int8 > int4: 8 anchors x 12 dims take 384, 192, 8 x 4 + 96 = 128 and
    // 8 x 4 + 48 = 80 bytes.
    assert_eq!(sizes, vec![384, 192, 128, 80]);
}

/// The file offset of section `tag` in `b`.
fn section_offset(b: &[u8], tag: &[u8; 4]) -> usize {
    let entry = b[HEADER_SIZE..]
        .chunks_exact(32)
        .find(|e| &e[..4] == tag)
        .unwrap();
    u64::from_le_bytes(entry[8..16].try_into().unwrap()) as usize
}

/// The length of section `tag` in `b`, from the section table.
fn section_length(b: &[u8], tag: &[u8; 4]) -> u64 {
    let entry = b[HEADER_SIZE..]
        .chunks_exact(32)
        .find(|e| &e[..4] == tag)
        .unwrap();
    u64::from_le_bytes(entry[16..24].try_into().unwrap())
}

/// `b` with `value` written into section `tag` at `at` and that section's checksum fixed.
fn with_section_bytes(b: &[u8], tag: &[u8; 4], at: usize, value: &[u8]) -> Vec<u8> {
    let mut out = b.to_vec();
    let e = HEADER_SIZE
        + out[HEADER_SIZE..]
            .chunks_exact(32)
            .position(|e| &e[..4] == tag)
            .unwrap()
            * 32;
    let offset = u64::from_le_bytes(out[e + 8..e + 16].try_into().unwrap()) as usize;
    let length = u64::from_le_bytes(out[e + 16..e + 24].try_into().unwrap()) as usize;
    out[offset + at..offset + at + value.len()].copy_from_slice(value);
    let crc = crc32fast::hash(&out[offset..offset + length]);
    out[e + 24..e + 28].copy_from_slice(&crc.to_le_bytes());
    // The table's own checksum (header bytes 48..52), then the header's.
    let count = u32::from_le_bytes(out[36..40].try_into().unwrap()) as usize;
    let table_crc = crc32fast::hash(&out[HEADER_SIZE..HEADER_SIZE + 32 * count]);
    with_header_field(&out, 48, &table_crc.to_le_bytes())
}

/// A new index codes its ids by Elias-Fano per list (format version 10, `IDEF`) where that is
/// smaller than packing them; a bad universe or length is named, and so is the section in a
/// file of an earlier version. Files of versions 3 to 9 hold packed ids (`IDSP`), whose bad
/// widths are named too.
#[test]
fn ids_are_coded_per_list_and_bad_id_sections_are_named() {
    let b = bytes();
    assert!(b[HEADER_SIZE..]
        .chunks_exact(32)
        .all(|e| &e[..4] != b"IDSP"));
    let at = section_offset(b, b"IDEF");
    let len = section_length(b, b"IDEF");
    // 300 vectors: the universe is 300.
    assert_eq!(u64::from_le_bytes(b[at..at + 8].try_into().unwrap()), 300);
    let index = Index::from_bytes(b).unwrap();
    let bits = len as f64 * 8.0 / 300.0;
    // Fewer bits than packing's 9, as the writer only picks it then.
    assert!(bits < 9.0, "{bits}");
    assert!(
        (index.code_bytes_per_vector()
            - (bits / 8.0 + index.code_size() as f64 + index.refine_code_size().unwrap() as f64))
            .abs()
            < 1e-9
    );
    assert!(
        index.id_storage().contains("Elias-Fano"),
        "{}",
        index.id_storage()
    );
    for universe in [0u64, 299, 1 << 33] {
        let bad = with_section_bytes(b, b"IDEF", 0, &universe.to_le_bytes());
        let err = Index::from_bytes(&bad).unwrap_err();
        assert!(
            matches!(err, VlcError::Corrupt { .. }) && err.to_string().contains("universe"),
            "universe {universe}: {err}"
        );
    }
    let err = Index::from_bytes(&with_header_field(b, 8, &9u32.to_le_bytes())).unwrap_err();
    assert!(err.to_string().contains("`IDEF` in a version 9"), "{err}");
    // A plain-id version (1 or 2) does not read the section as u32 ids either.
    let plain_anchors = to_bytes(&{
        let data = clustered(300, DIM, 6, 0.3, 4);
        let mut params = BuildParams::default()
            .with_codec(CodecKind::AnchorOnly)
            .with_num_anchors(8);
        params.anchor_precision = AnchorPrecision::F32;
        Index::build(&data, DIM, &params, &CpuBackend, &mut |_| {})
            .unwrap()
            .0
    });
    let err =
        Index::from_bytes(&with_header_field(&plain_anchors, 8, &1u32.to_le_bytes())).unwrap_err();
    assert!(err.to_string().contains("`IDEF` in a version 1"), "{err}");
    // Both id sections: the `META` entry renamed `IDSP` (the table's checksum fixed).
    let mut both = b.to_vec();
    let entry = HEADER_SIZE
        + both[HEADER_SIZE..]
            .chunks_exact(32)
            .position(|e| &e[..4] == b"META")
            .unwrap()
            * 32;
    both[entry..entry + 4].copy_from_slice(b"IDSP");
    let count = u32::from_le_bytes(both[36..40].try_into().unwrap()) as usize;
    let table_crc = crc32fast::hash(&both[HEADER_SIZE..HEADER_SIZE + 32 * count]);
    let err =
        Index::from_bytes(&with_header_field(&both, 48, &table_crc.to_le_bytes())).unwrap_err();
    assert!(err.to_string().contains("both id sections"), "{err}");

    let v9 = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/v9-rabitq3-l2.vlc"),
    )
    .unwrap();
    let at = section_offset(&v9, b"IDSP");
    let width = u64::from_le_bytes(v9[at..at + 8].try_into().unwrap());
    let index = Index::from_bytes(&v9).unwrap();
    assert_eq!(index.id_storage(), format!("bit-packed at {width} bits"));
    for width in [0u64, width - 1, 33] {
        let bad = with_section_bytes(&v9, b"IDSP", 0, &width.to_le_bytes());
        let err = Index::from_bytes(&bad).unwrap_err();
        assert!(
            matches!(err, VlcError::Corrupt { .. }) && err.to_string().contains("id"),
            "width {width}: {err}"
        );
    }
}

#[test]
fn section_payload_flip_names_the_section() {
    let b = bytes();
    let table = &b[HEADER_SIZE..];
    let entry = table.chunks_exact(32).find(|e| &e[..4] == b"CODE").unwrap();
    let offset = u64::from_le_bytes(entry[8..16].try_into().unwrap()) as usize;
    let mut bad = b.to_vec();
    bad[offset + 3] ^= 1;
    match Index::from_bytes(&bad).unwrap_err() {
        VlcError::ChecksumMismatch { section, .. } => assert_eq!(section, "CODE"),
        e => panic!("unexpected {e}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn bit_flips_in_header_and_table_are_rejected(pos in 0usize..(HEADER_SIZE + 8 * 32), bit in 0u8..8) {
        let b = bytes();
        let count = u32::from_le_bytes(b[36..40].try_into().unwrap()) as usize;
        let pos = pos % (HEADER_SIZE + count * 32);
        let mut bad = b.to_vec();
        bad[pos] ^= 1 << bit;
        prop_assert!(Index::from_bytes(&bad).is_err(), "flip at byte {} bit {} accepted", pos, bit);
    }

    #[test]
    fn random_bytes_never_panic(garbage in proptest::collection::vec(any::<u8>(), 0..400), keep_header in any::<bool>()) {
        let mut v = garbage;
        if keep_header && v.len() >= 8 {
            v[..8].copy_from_slice(b"VLCINDEX");
        }
        let _ = Index::from_bytes(&v);
    }
}

/// Every section's, the table's and the header's checksum of `b` recomputed (entries whose range
/// lies outside the file are left as they are).
fn with_checksums_fixed(mut b: Vec<u8>) -> Vec<u8> {
    let count = (u32::from_le_bytes(b[36..40].try_into().unwrap()) as usize).min(16);
    if HEADER_SIZE + 32 * count <= b.len() {
        for e in (0..count).map(|i| HEADER_SIZE + 32 * i) {
            let offset = u64::from_le_bytes(b[e + 8..e + 16].try_into().unwrap());
            let length = u64::from_le_bytes(b[e + 16..e + 24].try_into().unwrap());
            match offset.checked_add(length) {
                Some(end) if end <= b.len() as u64 => {
                    let crc = crc32fast::hash(&b[offset as usize..end as usize]);
                    b[e + 24..e + 28].copy_from_slice(&crc.to_le_bytes());
                }
                _ => {}
            }
        }
        let table_crc = crc32fast::hash(&b[HEADER_SIZE..HEADER_SIZE + 32 * count]);
        b[48..52].copy_from_slice(&table_crc.to_le_bytes());
    }
    with_header_field(&b, 60, &[])
}

/// Indexes of every kind of section content: each codec family, a refine tier, f16 and int4
/// anchors, a centre, the cosine metric and `pcaq` axes wider than 8 bits. With the data each
/// was built from. Layout of the data: (rows, 24), row-major.
fn varied_indexes() -> Vec<(&'static str, Index, Vec<f32>)> {
    let dim = 24;
    let data = clustered(400, dim, 6, 0.3, 4);
    let far: Vec<f32> = data.iter().map(|v| v + 100.0).collect();
    // Four dimensions with 64 times the spread of the rest: pcaq gives their axes more than
    // 8 bits (as in `pcaq_widths_above_8_bits_need_format_version_8`).
    let wide: Vec<f32> = data
        .iter()
        .enumerate()
        .map(|(k, &x)| if k % dim < 4 { 64.0 * x } else { x })
        .collect();
    let pcaq = |bits: f32, precision: AnchorPrecision| {
        let mut p = BuildParams::default()
            .with_codec(CodecKind::PcaRaBitQ)
            .with_num_anchors(8);
        p.codec_params.bits = bits;
        p.anchor_precision = precision;
        p
    };
    let mut sq4 = BuildParams::default()
        .with_codec(CodecKind::Sq4)
        .with_num_anchors(8);
    sq4.codec_params.jacobian = true;
    let mut anchor_only = BuildParams::default()
        .with_codec(CodecKind::AnchorOnly)
        .with_num_anchors(8);
    anchor_only.anchor_precision = AnchorPrecision::F16;
    let two = |codec, refine| {
        BuildParams::default()
            .with_codec(codec)
            .with_refine(Some(refine))
            .with_num_anchors(8)
    };
    let cases = [
        (
            "rabitq1+sq8",
            two(CodecKind::RaBitQ1, CodecKind::Sq8),
            &data,
        ),
        (
            "rabitq3+f32",
            two(CodecKind::RaBitQ3, CodecKind::F32),
            &data,
        ),
        (
            "rabitq5+f16 cosine",
            two(CodecKind::RaBitQ5, CodecKind::F16).with_metric(Metric::Cosine),
            &data,
        ),
        ("pcaq2.5", pcaq(2.5, AnchorPrecision::Int8), &data),
        ("pcaq1 int4 centred", pcaq(1.0, AnchorPrecision::Int4), &far),
        ("pcaq7 wide axes", pcaq(7.0, AnchorPrecision::Int8), &wide),
        ("sq4 jacobian", sq4, &data),
        ("anchor-only f16", anchor_only, &data),
    ];
    cases
        .into_iter()
        .map(|(name, params, data)| {
            let index = Index::build(data, dim, &params, &CpuBackend, &mut |_| {})
                .unwrap()
                .0;
            (name, index, data.clone())
        })
        .collect()
}

/// A file whose bytes were changed and whose checksums were then recomputed (a crafted file, or
/// a writer's bug) passes the checksums, so only the reader's own checks stand between its
/// contents and the search: such a file must fail to open with an error, or open and then
/// search, grow, shrink and save without a panic. Each case changes 1 to 3 places of one
/// region (a section, the header's counts and codecs, or the section table) to random bytes,
/// a flipped bit, or a telling 4- or 8-byte value (0, 1, all ones, NaN, infinity, 2⁴⁰).
#[test]
fn files_altered_with_their_checksums_fixed_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("altered.vlc");
    let mut rng = vlc::Rng::new(0x1234_5678);
    let mut below = |n: usize| rng.below(n.max(1));
    let (mut opened, mut rejected) = (0, 0);
    for (name, index, data) in varied_indexes() {
        let dim = index.dim();
        let good = to_bytes(&index);
        let count = u32::from_le_bytes(good[36..40].try_into().unwrap()) as usize;
        let queries = queries_near(&data, dim, 4, 0.05, 7);
        let to_add = SliceSource::new(&data[..dim * 20], dim).unwrap();
        for case in 0..200 {
            // The region: a section (its offset and length from the table), the header's
            // fields from dim to the section count, or the table after the first entry's tag.
            let (region, start, len) = match below(10) {
                0 => ("header".to_string(), 16, 24),
                1 => ("table".to_string(), HEADER_SIZE + 8, count * 32 - 8),
                _ => {
                    let e = HEADER_SIZE + 32 * below(count);
                    let field = |at: usize| {
                        u64::from_le_bytes(good[e + at..e + at + 8].try_into().unwrap()) as usize
                    };
                    (
                        String::from_utf8_lossy(&good[e..e + 4]).into_owned(),
                        field(8),
                        field(16),
                    )
                }
            };
            if len == 0 {
                continue;
            }
            let mut bad = good.clone();
            for _ in 0..1 + below(3) {
                let at = start + below(len);
                let value: Vec<u8> = match below(4) {
                    0 => vec![below(256) as u8],
                    1 => vec![bad[at] ^ (1 << below(8))],
                    2 => [
                        0u32,
                        1,
                        u32::MAX,
                        0x7FC0_0000,
                        0x7F80_0000,
                        0x8000_0000,
                        255,
                    ][below(7)]
                    .to_le_bytes()
                    .to_vec(),
                    _ => [0u64, 1, u64::MAX, 1 << 40, 9][below(5)]
                        .to_le_bytes()
                        .to_vec(),
                };
                let n = value.len().min(start + len - at);
                bad[at..at + n].copy_from_slice(&value[..n]);
            }
            let bad = with_checksums_fixed(bad);
            std::fs::write(&path, &bad).unwrap();
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let (Ok(loaded), Ok(viewed)) = (Index::from_bytes(&bad), Index::view(&path)) else {
                    return false;
                };
                for index in [&loaded, &viewed] {
                    for probe_margin in [None, Some(1.0)] {
                        let params = SearchParams {
                            k: 10,
                            nprobe: 100,
                            rerank: 0,
                            probe_margin,
                        };
                        let _ = index.search(&queries[..dim], &params);
                        let _ = index.search_batch(&queries, &params, &CpuBackend);
                    }
                }
                let _ = loaded.add_from(&to_add, &CpuBackend, &mut |_| {});
                let _ = loaded.remove_ids(&[0, 1, 2]);
                let _ = loaded.save(dir.path().join("saved.vlc"));
                true
            }));
            match outcome {
                Ok(true) => opened += 1,
                Ok(false) => rejected += 1,
                Err(_) => {
                    panic!("{name}, case {case}: a change in `{region}` made the reader panic")
                }
            }
        }
    }
    // Both outcomes occur: the cases reach past the checks into the search.
    assert!(
        opened > 100 && rejected > 100,
        "opened {opened}, rejected {rejected}"
    );
}

#[test]
fn failed_save_leaves_the_old_index_and_no_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("good.vlc");
    let index = small_index(CodecKind::Sq8, None);
    index.save(&path).unwrap();
    let before = std::fs::read(&path).unwrap();
    // Saving into a directory that does not exist fails cleanly.
    let missing = dir.path().join("no-such-dir").join("x.vlc");
    assert!(matches!(index.save(&missing), Err(VlcError::Io { .. })));
    // Saving over a directory fails and leaves it alone.
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    assert!(index.save(&sub).is_err());
    assert!(sub.is_dir());
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "stray files: {names:?}");
}

/// Saving through a symbolic link replaces the file it leads to, in that file's directory, and
/// keeps the link (a rename over the link replaced the link with a file and left the file it
/// named as it was); a saved file keeps the permissions of the one it replaces.
#[cfg(unix)]
#[test]
fn saves_follow_links_and_keep_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let target = real.join("index.vlc");
    small_index(CodecKind::Sq8, None).save(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = dir.path().join("link.vlc");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let newer = small_index(CodecKind::RaBitQ1, None);
    newer.save(&link).unwrap();
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), to_bytes(&newer));
    let mode = std::fs::metadata(&target).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    for d in [dir.path(), real.as_path()] {
        let names: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), if d == real { 1 } else { 2 }, "{names:?}");
    }
}

/// `check_writable` passes where a save could write (a new file, an existing one, a link),
/// fails with an I/O error naming the path where it could not (a missing directory, a
/// directory as the target, a read-only directory), and leaves no file behind either way.
#[cfg(unix)]
#[test]
fn check_writable_says_whether_a_save_could_write_and_leaves_nothing() {
    use std::os::unix::fs::PermissionsExt;
    use vlc::format::check_writable;
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new.vlc");
    check_writable(&new).unwrap();
    assert!(!new.exists());
    let existing = dir.path().join("old.vlc");
    std::fs::write(&existing, b"old").unwrap();
    check_writable(&existing).unwrap();
    std::os::unix::fs::symlink(&existing, dir.path().join("link.vlc")).unwrap();
    check_writable(&dir.path().join("link.vlc")).unwrap();
    assert_eq!(std::fs::read(&existing).unwrap(), b"old");
    let missing = dir.path().join("no_such_dir").join("x.vlc");
    let e = check_writable(&missing).unwrap_err().to_string();
    assert!(
        e.contains("no_such_dir: the directory does not exist"),
        "{e}"
    );
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let e = check_writable(&sub).unwrap_err().to_string();
    assert!(e.contains("directory"), "{e}");
    // A read-only directory (not as root, whom permissions do not stop).
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o555)).unwrap();
    let probe = sub.join("probe");
    let root = std::fs::write(&probe, b"").is_ok();
    let _ = std::fs::remove_file(&probe);
    if !root {
        let e = check_writable(&sub.join("x.vlc")).unwrap_err().to_string();
        assert!(e.contains("ermission denied"), "{e}");
    }
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["link.vlc", "old.vlc", "sub"]);
    assert_eq!(std::fs::read_dir(&sub).unwrap().count(), 0);
}

/// A save removes the temporary files beside its target that processes which have ended left
/// (killed mid-write: a hidden partial index as large as the index), and leaves those of a
/// running process, of other targets and of other names alone.
#[cfg(unix)]
#[test]
fn saves_remove_partial_files_of_ended_processes() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let ended = child.id();
    child.wait().unwrap();
    let stale = [
        format!(".index.vlc.tmp-{ended}"), // before session 64
        format!(".index.vlc.tmp-{ended}-3"),
        // This process's id, but no write of its own: an ended process had the same id.
        format!(".index.vlc.tmp-{}-77", std::process::id()),
    ];
    let kept = [
        ".index.vlc.tmp-1-0".to_string(), // init, or the container's first process: running
        ".index.vlc.tmp-x1".to_string(),
        format!(".index.vlc.tmp-{ended}-x"),
        format!(".other.vlc.tmp-{ended}"),
        format!("index.vlc.tmp-{ended}"),
    ];
    for name in stale.iter().chain(&kept) {
        std::fs::write(dir.path().join(name), b"partial").unwrap();
    }
    small_index(CodecKind::Sq8, None)
        .save(dir.path().join("index.vlc"))
        .unwrap();
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    let mut expected: Vec<String> = kept.to_vec();
    expected.push("index.vlc".to_string());
    expected.sort();
    assert_eq!(left, expected);
}

/// Two holders of one index's lock take turns (also through a link to the index); the second
/// is told it waits; dropping the lock lets it go; the lock file stays.
#[cfg(unix)]
#[test]
fn index_locks_take_turns() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use vlc::format::IndexLock;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index.vlc");
    small_index(CodecKind::Sq8, None).save(&path).unwrap();
    let link = dir.path().join("link.vlc");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let first = IndexLock::acquire(&path, &mut |_| panic!("nothing holds it yet")).unwrap();
    assert_eq!(
        first.path(),
        dir.path().join("index.vlc.lock").canonicalize().unwrap()
    );
    let (waited, taken) = (AtomicBool::new(false), AtomicBool::new(false));
    let lock_file = first.path().to_path_buf();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let second = IndexLock::acquire(&link, &mut |lock| {
                assert_eq!(lock, lock_file);
                waited.store(true, Ordering::SeqCst);
            })
            .unwrap();
            taken.store(true, Ordering::SeqCst);
            drop(second);
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(waited.load(Ordering::SeqCst) && !taken.load(Ordering::SeqCst));
        drop(first);
    });
    assert!(taken.load(Ordering::SeqCst));
    assert!(dir.path().join("index.vlc.lock").exists());
    IndexLock::acquire(&path, &mut |_| panic!("released")).unwrap();
}

#[test]
fn unreadable_paths_are_io_errors() {
    assert!(matches!(
        Index::load("/definitely/not/here.vlc"),
        Err(VlcError::Io { .. })
    ));
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(Index::view(dir.path()), Err(VlcError::Io { .. })));
    let empty = dir.path().join("empty.vlc");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        Index::load(&empty),
        Err(VlcError::Truncated { .. })
    ));
}
