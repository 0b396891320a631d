//! Huge pages for the large buffers a search reads at random places.
//!
//! A search reads its second-stage codes (a refine tier's, or a multi-bit code's) at scattered
//! places of the index, a filtered search its allowed vectors' codes as well. With 4 KiB pages
//! each of those reads also misses the TLB once the buffers outgrow what it maps (a few MiB),
//! and in a virtual machine a TLB miss walks two page tables. The buffers an index owns
//! (loaded, built, grown, and the fast-scan copy) are therefore marked for transparent huge
//! pages (`madvise(MADV_HUGEPAGE)`) and, on Linux 6.1 and later, made of them at once
//! (`MADV_COLLAPSE`). The gain depends on the machine (docs/benchmarks.md, "Huge pages"): on
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

/// Mark the whole huge pages that `items` spans for transparent huge pages, and where the
/// kernel can (Linux 6.1 and later), back them with huge pages now: on memory not yet
/// touched, its first touches then fault in huge pages; on memory already filled, the kernel
/// copies it into huge pages. Does nothing for buffers under [`MIN_BYTES`], or where
/// [`HUGE_PAGE`] is `None`; the kernel's refusals are ignored (it is a hint).
/// Returns whether the kernel backed them with huge pages now (`MADV_COLLAPSE` succeeded).
pub(crate) fn prefer_huge_pages<T>(items: &[T]) -> bool {
    let Some(huge) = *HUGE_PAGE else {
        return false;
    };
    let bytes = std::mem::size_of_val(items);
    if bytes < MIN_BYTES {
        return false;
    }
    let start = items.as_ptr() as usize;
    let (first, end) = (start.next_multiple_of(huge), (start + bytes) / huge * huge);
    first < end && advise(first, end - first)
}

/// Whether `MADV_COLLAPSE` succeeded.
#[cfg(target_os = "linux")]
fn advise(start: usize, len: usize) -> bool {
    /// `MADV_COLLAPSE` (Linux 6.1), which the `libc` crate defines for glibc targets only.
    const MADV_COLLAPSE: libc::c_int = 25;
    let mut collapsed = false;
    for advice in [libc::MADV_HUGEPAGE, MADV_COLLAPSE] {
        // SAFETY: `start..start + len` lies within the caller's live allocation (whole huge
        // pages inside it, so no other allocation shares them) and is page-aligned; these two
        // pieces of advice change how the kernel backs the pages, never their contents.
        collapsed = unsafe { libc::madvise(start as *mut libc::c_void, len, advice) } == 0;
    }
    collapsed
}

#[cfg(not(target_os = "linux"))]
fn advise(_start: usize, _len: usize) -> bool {
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
        let collapsed = prefer_huge_pages(&items);
        assert!(items.iter().enumerate().all(|(i, &v)| v == value(i)));
        items.iter_mut().for_each(|v| *v ^= 1);
        assert!(items.iter().enumerate().all(|(i, &v)| v == value(i) ^ 1));
        if collapsed {
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
        assert!(!prefer_huge_pages(&items[..10]));
        assert!(!prefer_huge_pages::<u8>(&[]));
    }
}
