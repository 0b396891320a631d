//! Huge pages for the large buffers a search reads at random places.
//!
//! A search reads its second-stage codes (a refine tier's, or a multi-bit code's) at scattered
//! places of the index, a filtered search its allowed vectors' codes as well. With 4 KiB pages
//! each of those reads also misses the TLB once the buffers outgrow what it maps (a few MiB),
//! and in a virtual machine a TLB miss walks two page tables. The buffers an index owns are
//! therefore marked for transparent huge pages (`madvise(MADV_HUGEPAGE)`): a loaded index's
//! sections and the fast-scan copy before they are filled, so that filling them faults in
//! huge pages; the codes of an index built or grown in memory, already filled, are also
//! copied into huge pages at once on Linux 6.1 and later (`MADV_COLLAPSE`). Where memory is
//! fragmented, the kernel may first compact it. The gain depends on the machine (docs/benchmarks.md, "Huge pages"): on
//! the development VM a lone unfiltered query of 1,000,000 x 128 `rabitq1 + sq8` took
//! 41.7 µs in each of three rounds, against 43.5-49.6 µs without; on the H200 host's CPU the
//! difference stayed within the rounds' spread.
//!
//! Linux only, where the kernel's transparent huge pages are not `never`; a hint, never an
//! error. `VLC_HUGE_PAGES=0` turns it off (for example where compacting memory for huge pages
//! stalls a loaded machine). An index opened with [`crate::Index::view`] reads the file's
//! pages in place, which the kernel maps as it maps the file.

use std::sync::LazyLock;

/// Buffers smaller than this are left as they are: they fit the TLB's reach either way.
const MIN_BYTES: usize = 4 << 20;

/// The size of a transparent huge page (`hpage_pmd_size`; 2 MiB on x86-64 and on aarch64 with
/// 4 KiB pages), or `None` where huge pages are off: not Linux, `VLC_HUGE_PAGES=0`, or the
/// kernel's setting `never`.
static HUGE_PAGE: LazyLock<Option<usize>> = LazyLock::new(|| {
    if !cfg!(target_os = "linux") || std::env::var("VLC_HUGE_PAGES").is_ok_and(|v| v == "0") {
        return None;
    }
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let enabled = read("/sys/kernel/mm/transparent_hugepage/enabled")?;
    if enabled.contains("[never]") {
        return None;
    }
    let size = read("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(2 << 20);
    size.is_power_of_two().then_some(size)
});

/// Mark the whole huge pages that `items` spans for transparent huge pages
/// (`MADV_HUGEPAGE`), for a buffer not yet touched (a fresh zeroed allocation): its first
/// touches then fault in huge pages. Does nothing for buffers under [`MIN_BYTES`], or where
/// [`HUGE_PAGE`] is `None`; the kernel's refusal is ignored (it is a hint).
pub(crate) fn advise_huge_pages<T>(items: &[T]) {
    if let Some((start, len)) = huge_range(items) {
        advise(start, len, false);
    }
}

/// [`advise_huge_pages`] for a buffer already filled, and where the kernel can (Linux 6.1
/// and later), back it with huge pages now (`MADV_COLLAPSE`: the kernel copies it into
/// them). Returns whether it did.
pub(crate) fn collapse_into_huge_pages<T>(items: &[T]) -> bool {
    huge_range(items).is_some_and(|(start, len)| advise(start, len, true))
}

/// The whole huge pages inside `items` (start address, length in bytes), where huge pages are
/// on and `items` spans at least [`MIN_BYTES`] and one whole huge page.
fn huge_range<T>(items: &[T]) -> Option<(usize, usize)> {
    let huge = (*HUGE_PAGE)?;
    let bytes = std::mem::size_of_val(items);
    if bytes < MIN_BYTES {
        return None;
    }
    let start = items.as_ptr() as usize;
    let (first, end) = (start.next_multiple_of(huge), (start + bytes) / huge * huge);
    (first < end).then_some((first, end - first))
}

/// `MADV_HUGEPAGE` over `start..start + len`, then `MADV_COLLAPSE` where `collapse`; whether
/// the collapse succeeded.
#[cfg(target_os = "linux")]
fn advise(start: usize, len: usize, collapse: bool) -> bool {
    /// `MADV_COLLAPSE` (Linux 6.1), which the `libc` crate defines for glibc targets only.
    const MADV_COLLAPSE: libc::c_int = 25;
    let advice: &[libc::c_int] = if collapse {
        &[libc::MADV_HUGEPAGE, MADV_COLLAPSE]
    } else {
        &[libc::MADV_HUGEPAGE]
    };
    let mut done = false;
    for &advice in advice {
        // SAFETY: `start..start + len` lies within the caller's live allocation (whole huge
        // pages inside it, so no other allocation shares them) and is page-aligned; these two
        // pieces of advice change how the kernel backs the pages, never their contents.
        done = unsafe { libc::madvise(start as *mut libc::c_void, len, advice) } == 0;
    }
    collapse && done
}

#[cfg(not(target_os = "linux"))]
fn advise(_start: usize, _len: usize, _collapse: bool) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `AnonHugePages` (KiB) of the mapping of this process that holds `address`, from
    /// `/proc/self/smaps`; `None` where that cannot be read.
    fn huge_kib_at(address: usize) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-').filter(|_| !line.ends_with(" kB")) {
                let parse = |s: &str| usize::from_str_radix(s, 16).ok();
                if let (Some(lo), Some(hi)) = (parse(lo), parse(hi)) {
                    inside = (lo..hi).contains(&address);
                    continue;
                }
            }
            if let Some(rest) = line.strip_prefix("AnonHugePages:").filter(|_| inside) {
                return rest.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
        None
    }

    #[test]
    fn advice_keeps_contents_and_backs_with_huge_pages_where_the_kernel_says_so() {
        // A buffer spanning several huge pages, filled before the advice: the advice (and the
        // copy into huge pages it may cause) changes no byte.
        let len = 3 * MIN_BYTES / 4 + 12345;
        let value = |i: usize| (i as u32).wrapping_mul(2654435761);
        let mut items: Vec<u32> = (0..len).map(value).collect();
        let collapsed = collapse_into_huge_pages(&items);
        assert!(items.iter().enumerate().all(|(i, &v)| v == value(i)));
        items.iter_mut().for_each(|v| *v ^= 1);
        assert!(items.iter().enumerate().all(|(i, &v)| v == value(i) ^ 1));
        // Under a user-mode emulator (cargo's runner for another architecture, as CI's
        // qemu-aarch64), the emulator answers the advice itself and shows its own view of
        // the mappings: only the contents can be checked there.
        let emulated =
            std::env::vars().any(|(k, _)| k.starts_with("CARGO_TARGET_") && k.ends_with("_RUNNER"));
        if emulated {
            eprintln!(
                "huge pages: SKIPPED the check of the mapping (run by cargo's runner, an emulator)"
            );
        } else if collapsed {
            // Where the kernel reports the collapse, the mapping holds huge pages.
            let middle = items.as_ptr() as usize + 2 * len;
            let kib = huge_kib_at(middle).expect("/proc/self/smaps lists the buffer");
            assert!(
                kib > 0,
                "MADV_COLLAPSE succeeded, yet no huge page backs the buffer"
            );
        } else {
            eprintln!("huge pages: not collapsed here (not Linux 6.1+, off, or refused)");
        }
        // Small and empty buffers are left alone (and must not fault).
        assert!(!collapse_into_huge_pages(&items[..10]));
        advise_huge_pages(&items[..10]);
        assert!(!collapse_into_huge_pages::<u8>(&[]));
        advise_huge_pages::<u8>(&[]);
    }
}
