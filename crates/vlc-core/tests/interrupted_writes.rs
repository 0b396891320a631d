//! `format::remove_unfinished_writes`, as an interrupt handler calls it: alone in its test
//! binary, as it removes the temporary files of every write under way in the process.

use vlc::format::{remove_unfinished_writes, write_atomic, write_atomic_with};
use vlc::VlcError;

#[test]
fn an_interrupted_write_leaves_the_old_file_and_no_partial_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index.vlc");
    write_atomic(&path, b"the good index").unwrap();
    assert!(remove_unfinished_writes().is_empty(), "no write under way");
    let mut removed = Vec::new();
    let result = write_atomic_with(&path, &mut |out| {
        out.write_all(&[7u8; 3 << 20])?; // past the write buffer: on disk
        removed = remove_unfinished_writes();
        out.write_all(b"the rest")
    });
    assert!(matches!(result, Err(VlcError::Io { .. })), "{result:?}");
    assert_eq!(removed.len(), 1, "{removed:?}");
    let name = removed[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(name.starts_with(".index.vlc.tmp-"), "{name}");
    assert_eq!(std::fs::read(&path).unwrap(), b"the good index");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["index.vlc"]);
    // Finished writes leave nothing to remove, and the next write succeeds.
    write_atomic(&path, b"a newer index").unwrap();
    assert!(remove_unfinished_writes().is_empty());
    assert_eq!(std::fs::read(&path).unwrap(), b"a newer index");
}
