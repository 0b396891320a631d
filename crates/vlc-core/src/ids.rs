//! Caller ids in list order, stored in few bits.
//!
//! An index maps each list position back to the caller's id. Format version 3 packs them at a
//! fixed width `w` = the bit length of the largest id (1..=32): 16 bits for up to 65,536
//! vectors, 20 for a million, instead of 32 each. Format version 10 codes each list's ids,
//! which ascend within the list, by Elias-Fano ([`ListIds`]): about `2 + log2(u / n)` bits an
//! id for a list of `n` ids below `u`, i.e. about `2 + log2(num_lists)` when the lists are of
//! similar size (11.7 bits instead of 16 for 60,601 ids in 1,024 lists; 18 instead of 27 for
//! 10^8 ids in 65,536). The writer takes it where every list ascends and it is smaller. Older
//! files hold plain `u32` ids and are read as they are. Only the final results of a search
//! look ids up, so decoding costs nothing measurable.
//!
//! Packed layout, as little-endian `u64` words: word 0 is `w`; then the bit stream in which id
//! `i` occupies bits `i·w .. i·w + w` (bit `b` of the stream is bit `b % 64` of word
//! `1 + b / 64`), then one zero word so that reading any id touches two whole words.
//!
//! Elias-Fano layout, as little-endian `u64` words: word 0 is the universe `u` (one more than
//! the largest id; 0 without ids); then one bit stream (bits numbered as above) holding, list
//! after list in anchor order, for a list of `n ≥ 1` ids `v_0 < v_1 < … < v_{n−1}` with
//! `L = ⌊log2(u / n)⌋` (0 where `u < 2n`): the low bits, `n·L` bits in which `v_i mod 2^L`
//! occupies bits `i·L .. i·L + L`, then the high bits, `n + ((u − 1) >> L) + 1` bits in which
//! bit `(v_i >> L) + i` is set and every other bit is clear. An empty list takes no bits. The
//! stream ends with zero bits up to a whole word, then one zero word. Every size follows from
//! `u` and the list sizes (`LOFF`), so the section holds nothing else.

use crate::error::{Result, VlcError};
use crate::format::Section;
use std::borrow::Cow;

/// Ids in list order: plain `u32` (format versions 1 and 2), bit-packed (version 3) or
/// Elias-Fano per list (version 10).
pub enum Ids {
    /// Layout: (num_vectors,).
    Plain(Section<u32>),
    /// Layout: see the module docs; `num` ids.
    Packed { words: Section<u64>, num: usize },
    /// Layout: see the module docs.
    PerList(ListIds),
}

/// The section an index's ids are written to.
pub enum IdSection<'a> {
    /// `IDSP`: bit-packed at one width.
    Packed(Cow<'a, [u64]>),
    /// `IDEF`: Elias-Fano per list.
    PerList(&'a [u64]),
}

/// Ids coded by Elias-Fano per list (see the module docs), with an in-memory directory built
/// when they are made or read: where each list's bits start, and every [`SAMPLE`]-th set bit
/// of its high part, so that looking an id up scans at most a few words.
pub struct ListIds {
    /// Layout: see the module docs (word 0 the universe, the bit stream, one zero word).
    words: Section<u64>,
    num: usize,
    /// Layout: (num_lists,), in anchor order.
    lists: Vec<ListEntry>,
    /// Each list's first position (the list offsets less the last). Layout: (num_lists,).
    starts: Vec<u64>,
    /// For each bucket of `2^bucket_shift` positions, the list that holds the bucket's first
    /// position, so that finding a position's list steps over a list or two instead of a
    /// binary search. Layout: ((num >> bucket_shift) + 1,).
    buckets: Vec<u32>,
    bucket_shift: u32,
    /// For each list, the position within its high part of the set bit of id `j·SAMPLE`, for
    /// `j = 0, 1, …` (`ListEntry::first_sample` says where a list's samples start).
    samples: Vec<u32>,
}

/// Ids between two high-part samples.
pub const SAMPLE: usize = 64;

#[derive(Clone, Copy, Debug)]
struct ListEntry {
    /// Low bits per id.
    low_width: u32,
    /// Stream bit of the low part's first bit.
    low_bit: u64,
    /// Stream bit of the high part's first bit.
    high_bit: u64,
    /// Index of the list's first entry in `samples`.
    first_sample: u32,
}

/// `L` of a list of `n` ids below `u` (see the module docs).
fn low_width(u: u64, n: u64) -> u32 {
    if n == 0 || u / n < 2 {
        0
    } else {
        63 - (u / n).leading_zeros()
    }
}

/// Bits of a list's high part.
fn high_len(u: u64, n: u64, low_width: u32) -> u64 {
    if n == 0 {
        0
    } else {
        n + ((u - 1) >> low_width) + 1
    }
}

/// The directory of lists with these offsets (num_lists + 1, from 0 to the id count) and the
/// stream's length in bits; `None` on overflow.
fn directory(u: u64, offsets: &[u64]) -> Option<(Vec<ListEntry>, u64)> {
    let mut lists = Vec::with_capacity(offsets.len().saturating_sub(1));
    let mut bit = 0u64;
    let mut first_sample = 0u64;
    for w in offsets.windows(2) {
        let n = w[1].checked_sub(w[0])?;
        let low_width = low_width(u, n);
        let low_bit = bit;
        let high_bit = low_bit.checked_add(n.checked_mul(low_width as u64)?)?;
        bit = high_bit.checked_add(high_len(u, n, low_width))?;
        lists.push(ListEntry {
            low_width,
            low_bit,
            high_bit,
            first_sample: u32::try_from(first_sample).ok()?,
        });
        first_sample += n.div_ceil(SAMPLE as u64);
    }
    Some((lists, bit))
}

/// Words of an Elias-Fano section whose stream has `bits` bits (the universe word and the
/// padding word included).
fn per_list_len(bits: u64) -> Option<usize> {
    usize::try_from(bits.div_ceil(64)).ok()?.checked_add(2)
}

/// The 64 bits of the stream from stream bit `bit` (the stream's padding word makes the
/// second word exist for every bit of the stream).
#[inline]
fn bits_at(words: &[u64], bit: u64) -> u64 {
    let (word, shift) = (1 + (bit / 64) as usize, bit % 64);
    if shift == 0 {
        words[word]
    } else {
        (words[word] >> shift) | (words[word + 1] << (64 - shift))
    }
}

/// Bits `bit .. bit + width` of the stream (width ≤ 32).
#[inline]
fn read_bits(words: &[u64], bit: u64, width: u32) -> u64 {
    if width == 0 {
        0
    } else {
        bits_at(words, bit) & ((1u64 << width) - 1)
    }
}

/// Set stream bits `bit .. bit + width` to `value` (they are clear).
fn write_bits(words: &mut [u64], bit: u64, width: u32, value: u64) {
    if width == 0 {
        return;
    }
    let (word, shift) = (1 + (bit / 64) as usize, bit % 64);
    words[word] |= value << shift;
    if shift + width as u64 > 64 {
        words[word + 1] |= value >> (64 - shift);
    }
}

/// Position of the `k`-th set bit (from 0) of `word`, which has more than `k`: the byte that
/// holds it by counting whole bytes, then at most 7 bits cleared within it.
#[inline]
fn select_in_word(word: u64, mut k: u32) -> u32 {
    let mut shift = 0;
    loop {
        let ones = ((word >> shift) & 0xFF).count_ones();
        if ones > k {
            break;
        }
        k -= ones;
        shift += 8;
    }
    let mut byte = (word >> shift) & 0xFF;
    for _ in 0..k {
        byte &= byte - 1;
    }
    shift + byte.trailing_zeros()
}

/// `(buckets, bucket_shift)` of `ListIds` for lists starting at `starts` (ascending from 0)
/// that hold `num` positions: buckets about as wide as the mean list.
fn buckets(starts: &[u64], num: usize) -> (Vec<u32>, u32) {
    let mean = num / starts.len().max(1);
    let shift = if mean < 2 { 0 } else { mean.ilog2() };
    let count = (num >> shift) + 1;
    let mut out = Vec::with_capacity(count);
    let mut list = 0usize;
    for b in 0..count {
        let first = (b as u64) << shift;
        while list + 1 < starts.len() && starts[list + 1] <= first {
            list += 1;
        }
        out.push(list as u32);
    }
    (out, shift)
}

impl ListIds {
    /// Code `ids` (in list order) of lists with these offsets (num_lists + 1, from 0 to
    /// `ids.len()`); `None` where a list's ids do not ascend strictly.
    pub fn encode(ids: &[u32], offsets: &[u64]) -> Option<ListIds> {
        debug_assert_eq!(offsets.last().copied().unwrap_or(0), ids.len() as u64);
        for w in offsets.windows(2) {
            if ids[w[0] as usize..w[1] as usize]
                .windows(2)
                .any(|p| p[0] >= p[1])
            {
                return None;
            }
        }
        let u = ids.iter().max().map_or(0, |&m| m as u64 + 1);
        let (lists, bits) = directory(u, offsets).expect("ids fit in memory");
        let mut words = vec![0u64; per_list_len(bits).expect("ids fit in memory")];
        words[0] = u;
        for (list, w) in lists.iter().zip(offsets.windows(2)) {
            let list_ids = &ids[w[0] as usize..w[1] as usize];
            for (i, &id) in list_ids.iter().enumerate() {
                let id = id as u64;
                write_bits(
                    &mut words,
                    list.low_bit + i as u64 * list.low_width as u64,
                    list.low_width,
                    id & ((1u64 << list.low_width) - 1),
                );
                write_bits(
                    &mut words,
                    list.high_bit + (id >> list.low_width) + i as u64,
                    1,
                    1,
                );
            }
        }
        Some(
            Self::with_directory(Section::Owned(words), lists, offsets)
                .expect("a stream just written has its set bits"),
        )
    }

    /// The ids of a stream with this directory (see [`directory`]), with the high-part samples
    /// and the bucket table built; `None` where a list's high part does not hold one set bit
    /// per id.
    fn with_directory(
        words: Section<u64>,
        lists: Vec<ListEntry>,
        offsets: &[u64],
    ) -> Option<ListIds> {
        let samples = Self::sample_all(&words, &lists, offsets)?;
        let num = offsets.last().copied().unwrap_or(0) as usize;
        let starts: Vec<u64> = offsets[..offsets.len().saturating_sub(1)].to_vec();
        let (buckets, bucket_shift) = buckets(&starts, num);
        Some(ListIds {
            words,
            num,
            starts,
            buckets,
            bucket_shift,
            lists,
            samples,
        })
    }

    /// Positions (within each list's high part) of every `SAMPLE`-th set bit; `None` where a
    /// list's high part does not hold exactly one set bit per id.
    fn sample_all(words: &[u64], lists: &[ListEntry], offsets: &[u64]) -> Option<Vec<u32>> {
        let u = words[0];
        let mut samples = Vec::new();
        for (list, w) in lists.iter().zip(offsets.windows(2)) {
            let n = w[1] - w[0];
            let len = high_len(u, n, list.low_width);
            let mut seen = 0u64;
            let mut at = 0u64;
            while at < len {
                let take = (len - at).min(64) as u32;
                let mut word = bits_at(words, list.high_bit + at);
                if take < 64 {
                    word &= (1u64 << take) - 1;
                }
                let ones = word.count_ones() as u64;
                // Samples that fall in this word: ids seen.. seen + ones.
                let mut next = seen.div_ceil(SAMPLE as u64) * SAMPLE as u64;
                while next < seen + ones {
                    let bit = select_in_word(word, (next - seen) as u32) as u64;
                    samples.push(u32::try_from(at + bit).ok()?);
                    next += SAMPLE as u64;
                }
                seen += ones;
                at += 64;
            }
            if seen != n {
                return None;
            }
        }
        Some(samples)
    }

    /// Check an Elias-Fano section read from a file against the list offsets (already checked
    /// to rise from 0 to the id count): its length, one set bit per id in each high part, ids
    /// that ascend within each list and lie below the universe. `at` is the section's file
    /// offset, for the error.
    pub fn from_section(words: Section<u64>, offsets: &[u64], at: u64) -> Result<ListIds> {
        let corrupt = |what: String| VlcError::Corrupt { what, offset: at };
        let u = *words
            .first()
            .ok_or_else(|| corrupt("the Elias-Fano id section is empty".into()))?;
        let num = offsets.last().copied().unwrap_or(0);
        if u > 1 << 32 || (u == 0) != (num == 0) || u < num {
            return Err(corrupt(format!(
                "Elias-Fano id universe {u} for {num} ids (expected {num}..=2^32, 0 only without ids)"
            )));
        }
        let (lists, bits) =
            directory(u, offsets).ok_or_else(|| corrupt("Elias-Fano id sizes overflow".into()))?;
        let expected =
            per_list_len(bits).ok_or_else(|| corrupt("Elias-Fano id sizes overflow".into()))?;
        if words.len() != expected {
            return Err(corrupt(format!(
                "the Elias-Fano id section has {} words, {num} ids in {} lists below {u} need {expected}",
                words.len(),
                lists.len()
            )));
        }
        let ids = Self::with_directory(words, lists, offsets).ok_or_else(|| {
            corrupt("an Elias-Fano id list does not hold one high bit per id".into())
        })?;
        // Every id decodes below the universe and ascends within its list.
        for (l, w) in offsets.windows(2).enumerate() {
            let mut last = None;
            for p in w[0]..w[1] {
                let id = ids.get_in(l, p as usize);
                if id >= u || last.is_some_and(|prev| prev >= id) {
                    return Err(corrupt(format!(
                        "Elias-Fano ids of list {l} do not ascend below {u} (position {p})"
                    )));
                }
                last = Some(id);
            }
        }
        Ok(ids)
    }

    /// The id at list position `position` of list `list`, as u64 (unchecked against `u`).
    #[inline]
    fn get_in(&self, list: usize, position: usize) -> u64 {
        let e = &self.lists[list];
        let i = position as u64 - self.starts[list];
        let low = read_bits(&self.words, e.low_bit + i * e.low_width as u64, e.low_width);
        // The `i`-th set bit of the high part, from the sample at or before it.
        let sample = i as usize / SAMPLE;
        let mut at = self.samples[e.first_sample as usize + sample] as u64;
        let mut left = (i as usize % SAMPLE) as u32;
        loop {
            let word = bits_at(&self.words, e.high_bit + at);
            let ones = word.count_ones();
            if ones > left {
                at += select_in_word(word, left) as u64;
                break;
            }
            left -= ones;
            at += 64;
        }
        ((at - i) << e.low_width) | low
    }

    /// The id at list position `position` (< the id count).
    #[inline]
    pub fn get(&self, position: usize) -> u32 {
        debug_assert!(position < self.num);
        // The last list starting at or before `position` (empty lists before it share its
        // start, and it holds `position`), from the bucket's first list on.
        let p = position as u64;
        let mut list = self.buckets[position >> self.bucket_shift] as usize;
        while list + 1 < self.starts.len() && self.starts[list + 1] <= p {
            list += 1;
        }
        self.get_in(list, position) as u32
    }

    /// The section's words.
    pub fn words(&self) -> &[u64] {
        &self.words
    }
}

impl std::fmt::Debug for ListIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListIds")
            .field("len", &self.num)
            .field("lists", &self.lists.len())
            .field("words", &self.words.len())
            .finish()
    }
}

impl std::fmt::Debug for Ids {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ids")
            .field("len", &self.len())
            .field("bits_per_id", &self.bits_per_id())
            .finish()
    }
}

/// Bit length of `max_id` (at least 1).
pub fn width_for(max_id: u32) -> u32 {
    (32 - max_id.leading_zeros()).max(1)
}

/// Words of the packed section for `num` ids of `width` bits (the width word and the padding
/// word included); `None` on overflow.
pub fn packed_len(num: usize, width: u32) -> Option<usize> {
    num.checked_mul(width as usize)?.div_ceil(64).checked_add(2)
}

/// Pack `ids` at the bit length of the largest.
pub fn pack(ids: &[u32]) -> Vec<u64> {
    let width = width_for(ids.iter().copied().max().unwrap_or(0));
    let mut words = vec![0u64; packed_len(ids.len(), width).expect("ids fit in memory")];
    words[0] = width as u64;
    for (i, &id) in ids.iter().enumerate() {
        let bit = i * width as usize;
        let (word, shift) = (1 + bit / 64, bit % 64);
        words[word] |= (id as u64) << shift;
        if shift + width as usize > 64 {
            words[word + 1] |= (id as u64) >> (64 - shift);
        }
    }
    words
}

impl Ids {
    /// Packed `ids`.
    pub fn packed(ids: &[u32]) -> Ids {
        Ids::Packed {
            words: Section::Owned(pack(ids)),
            num: ids.len(),
        }
    }

    /// Check a packed section read from a file: a width of 1..=32 and the length it implies
    /// for `num` ids. `at` is the section's file offset, for the error.
    pub fn from_packed_section(words: Section<u64>, num: usize, at: u64) -> Result<Ids> {
        let corrupt = |what: String| VlcError::Corrupt { what, offset: at };
        let width = *words
            .first()
            .ok_or_else(|| corrupt("the packed id section is empty".into()))?;
        if !(1..=32).contains(&width) {
            return Err(corrupt(format!(
                "packed id width {width} (expected 1..=32)"
            )));
        }
        let expected = packed_len(num, width as u32)
            .ok_or_else(|| corrupt("packed id sizes overflow".into()))?;
        if words.len() != expected {
            return Err(corrupt(format!(
                "the packed id section has {} words, {num} ids of {width} bits need {expected}",
                words.len()
            )));
        }
        Ok(Ids::Packed { words, num })
    }

    /// Ids in list order, for lists with these offsets (num_lists + 1, from 0 to `ids.len()`):
    /// Elias-Fano per list where every list ascends and that is smaller, else bit-packed.
    pub fn for_lists(ids: &[u32], offsets: &[u64]) -> Ids {
        let packed_words = packed_len(ids.len(), width_for(ids.iter().copied().max().unwrap_or(0)))
            .expect("ids fit in memory");
        match ListIds::encode(ids, offsets) {
            Some(per_list) if per_list.words.len() < packed_words => Ids::PerList(per_list),
            _ => Ids::packed(ids),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Ids::Plain(ids) => ids.len(),
            Ids::Packed { num, .. } => *num,
            Ids::PerList(ids) => ids.num,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The largest id of lists with these offsets (num_lists + 1, from 0 to `len()`), `None`
    /// for no ids: the last of each list where every list ascends (Elias-Fano per list), else
    /// found by reading every id.
    pub fn max_id(&self, offsets: &[u64]) -> Option<u32> {
        match self {
            Ids::PerList(_) => offsets
                .windows(2)
                .enumerate()
                .filter(|(_, w)| w[1] > w[0])
                .map(|(list, w)| self.get_in_list(list, w[1] as usize - 1))
                .max(),
            _ => self.to_u32().iter().copied().max(),
        }
    }

    /// Bits each id takes in the file: the packed width, or the Elias-Fano section's bits over
    /// the id count (its two words of universe and padding included).
    pub fn bits_per_id(&self) -> f64 {
        match self {
            Ids::Plain(_) => 32.0,
            Ids::Packed { words, .. } => words[0] as f64,
            Ids::PerList(ids) => ids.words.len() as f64 * 64.0 / ids.num.max(1) as f64,
        }
    }

    /// How the ids are stored, for `vlc info`.
    pub fn describe(&self) -> String {
        match self {
            Ids::Plain(_) => "32-bit".into(),
            Ids::Packed { words, .. } => format!("bit-packed at {} bits", words[0]),
            Ids::PerList(_) => format!("Elias-Fano per list, {:.1} bits each", self.bits_per_id()),
        }
    }

    /// The id at list position `position` (< [`len`](Self::len)).
    #[inline]
    pub fn get(&self, position: usize) -> u32 {
        match self {
            Ids::Plain(ids) => ids[position],
            Ids::Packed { words, num } => {
                debug_assert!(position < *num);
                let width = words[0] as usize;
                let bit = position * width;
                let (word, shift) = (1 + bit / 64, bit % 64);
                // Two words always exist past `word` - 1: the stream's last word is followed
                // by the padding word.
                let both = (words[word] as u128) | ((words[word + 1] as u128) << 64);
                ((both >> shift) as u64 & ((1u64 << width) - 1)) as u32
            }
            Ids::PerList(ids) => ids.get(position),
        }
    }

    /// The id at list position `position`, which lies in list `list` (a search knows the list
    /// each candidate came from, which spares Elias-Fano ids finding it).
    #[inline]
    pub fn get_in_list(&self, list: usize, position: usize) -> u32 {
        match self {
            Ids::PerList(ids) => {
                debug_assert!(
                    ids.starts[list] <= position as u64
                        && ids
                            .starts
                            .get(list + 1)
                            .is_none_or(|&end| position < end as usize)
                );
                ids.get_in(list, position) as u32
            }
            _ => self.get(position),
        }
    }

    /// All ids, in list order, as `u32` (borrowed when stored plain).
    pub fn to_u32(&self) -> Cow<'_, [u32]> {
        match self {
            Ids::Plain(ids) => Cow::Borrowed(&ids[..]),
            Ids::Packed { num, .. } => Cow::Owned((0..*num).map(|p| self.get(p)).collect()),
            Ids::PerList(ids) => {
                let mut out = Vec::with_capacity(ids.num);
                for (l, &start) in ids.starts.iter().enumerate() {
                    let end = ids.starts.get(l + 1).copied().unwrap_or(ids.num as u64);
                    out.extend((start..end).map(|p| ids.get_in(l, p as usize) as u32));
                }
                Cow::Owned(out)
            }
        }
    }

    /// Bytes of the section the ids are written to.
    pub fn section_bytes(&self) -> usize {
        8 * match self {
            Ids::Plain(ids) => {
                packed_len(ids.len(), width_for(ids.iter().copied().max().unwrap_or(0)))
                    .expect("ids fit in memory")
            }
            Ids::Packed { words, .. } => words.len(),
            Ids::PerList(ids) => ids.words.len(),
        }
    }

    /// The section's words, as [`section`](Self::section) writes them.
    pub fn section_words(&self) -> Cow<'_, [u64]> {
        match self.section() {
            IdSection::Packed(words) => words,
            IdSection::PerList(words) => Cow::Borrowed(words),
        }
    }

    /// The section the ids are written to (plain ids packed on the way).
    pub fn section(&self) -> IdSection<'_> {
        match self {
            Ids::Plain(ids) => IdSection::Packed(Cow::Owned(pack(ids))),
            Ids::Packed { words, .. } => IdSection::Packed(Cow::Borrowed(&words[..])),
            Ids::PerList(ids) => IdSection::PerList(ids.words()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest id, from each list's last where lists ascend (Elias-Fano) and by reading
    /// every id otherwise (bit-packed, plain), with empty lists anywhere.
    #[test]
    fn the_largest_id_of_every_form() {
        let offsets = [0u64, 0, 3, 3, 5, 9, 9];
        let ascending = [4u32, 90, 700, 2, 3, 1, 8, 65, 66];
        let per_list = Ids::PerList(ListIds::encode(&ascending, &offsets).unwrap());
        assert_eq!(per_list.max_id(&offsets), Some(700));
        let unordered = [4u32, 700, 90, 3, 2, 8, 1, 66, 65];
        assert!(ListIds::encode(&unordered, &offsets).is_none());
        let packed = Ids::for_lists(&unordered, &offsets);
        assert!(matches!(packed, Ids::Packed { .. }));
        assert_eq!(packed.max_id(&offsets), Some(700));
        let plain = Ids::Plain(crate::format::Section::Owned(unordered.to_vec()));
        assert_eq!(plain.max_id(&offsets), Some(700));
        assert_eq!(Ids::packed(&[]).max_id(&[0, 0, 0]), None);
        let none = Ids::PerList(ListIds::encode(&[], &[0, 0, 0]).unwrap());
        assert_eq!(none.max_id(&[0, 0, 0]), None);
    }

    #[test]
    fn packed_ids_give_every_id_back_at_every_width_and_tail() {
        let mut rng = crate::Rng::new(5);
        for num in [0usize, 1, 2, 63, 64, 65, 127, 1000] {
            for max in [0u32, 1, 2, 255, 256, 65_535, 65_536, 1 << 31, u32::MAX] {
                let mut ids: Vec<u32> = (0..num)
                    .map(|_| (rng.next_u64() % (max as u64 + 1)) as u32)
                    .collect();
                if let Some(first) = ids.first_mut() {
                    *first = max;
                }
                let packed = Ids::packed(&ids);
                let width = if num == 0 { 1 } else { width_for(max) };
                assert_eq!(packed.bits_per_id(), width as f64);
                assert_eq!(packed.len(), num);
                let IdSection::Packed(words) = packed.section() else {
                    panic!("packed ids write the packed section")
                };
                let words = words.into_owned();
                assert_eq!(words.len(), packed_len(num, width).unwrap());
                assert_eq!(*words.last().unwrap(), 0, "padding word");
                for (p, &id) in ids.iter().enumerate() {
                    assert_eq!(packed.get(p), id, "num {num} max {max} position {p}");
                }
                assert_eq!(&packed.to_u32()[..], &ids[..]);
                // Plain ids pack to the same words.
                let plain = Ids::Plain(Section::Owned(ids.clone()));
                let IdSection::Packed(plain_words) = plain.section() else {
                    panic!("plain ids write the packed section")
                };
                assert_eq!(plain_words.into_owned(), words);
                // And a section read back is accepted.
                let back = Ids::from_packed_section(Section::Owned(words), num, 0).unwrap();
                assert_eq!(&back.to_u32()[..], &ids[..]);
            }
        }
    }

    /// Lists of ascending ids: `sizes` lists whose ids are drawn from `0..universe` without
    /// repeats, and the offsets.
    fn lists_of(sizes: &[usize], universe: u64, seed: u64) -> (Vec<u32>, Vec<u64>) {
        let mut rng = crate::Rng::new(seed);
        let total: usize = sizes.iter().sum();
        assert!(total as u64 <= universe);
        // Distinct ids: a partial shuffle of 0..universe where it is small, else random draws
        // deduplicated.
        let mut pool: Vec<u32> = if universe <= 4 * total as u64 + 64 {
            let mut all: Vec<u32> = (0..universe).map(|v| v as u32).collect();
            for i in 0..total {
                let j = i + (rng.next_u64() % (all.len() - i) as u64) as usize;
                all.swap(i, j);
            }
            all.truncate(total);
            all
        } else {
            let mut seen = std::collections::HashSet::new();
            let mut out = Vec::with_capacity(total);
            while out.len() < total {
                let v = (rng.next_u64() % universe) as u32;
                if seen.insert(v) {
                    out.push(v);
                }
            }
            out
        };
        // The largest id present, so that the universe is the one asked for.
        let top = (universe - 1) as u32;
        if !pool.is_empty() && !pool.contains(&top) {
            pool[0] = top;
        }
        let mut offsets = vec![0u64];
        let mut ids = Vec::with_capacity(total);
        let mut at = 0;
        for &n in sizes {
            let mut list = pool[at..at + n].to_vec();
            list.sort_unstable();
            ids.extend(list);
            at += n;
            offsets.push(at as u64);
        }
        (ids, offsets)
    }

    fn per_list(ids: &[u32], offsets: &[u64]) -> ListIds {
        ListIds::encode(ids, offsets).expect("ascending lists")
    }

    #[test]
    fn elias_fano_gives_every_id_back_across_list_sizes_and_universes() {
        let shapes: Vec<Vec<usize>> = vec![
            vec![1],
            vec![0, 1, 0],
            vec![5, 0, 0, 3, 0],
            vec![63, 64, 65, 0, 127, 128, 129],
            vec![1, 2, 3, 300, 1000],
            (0..200).map(|i| (i * 37) % 23).collect(),
        ];
        for (s, sizes) in shapes.iter().enumerate() {
            let total: u64 = sizes.iter().sum::<usize>() as u64;
            for universe in [total, total + 1, 2 * total + 3, 1 << 20, 1u64 << 32] {
                if universe == 0 {
                    continue;
                }
                let (ids, offsets) = lists_of(sizes, universe, 11 + s as u64);
                let coded = per_list(&ids, &offsets);
                assert_eq!(coded.words()[0], universe, "shape {s}");
                let wrapped = Ids::PerList(coded);
                for (p, &id) in ids.iter().enumerate() {
                    assert_eq!(
                        wrapped.get(p),
                        id,
                        "shape {s} universe {universe} position {p}"
                    );
                }
                assert_eq!(&wrapped.to_u32()[..], &ids[..]);
                assert_eq!(*wrapped.section_words().last().unwrap(), 0, "padding word");
                // Read back from its words.
                let back = ListIds::from_section(
                    Section::Owned(wrapped.section_words().to_vec()),
                    &offsets,
                    0,
                )
                .unwrap();
                assert_eq!(&Ids::PerList(back).to_u32()[..], &ids[..]);
            }
        }
    }

    #[test]
    fn elias_fano_takes_about_two_bits_plus_the_log_of_the_list_count() {
        // 60,000 ids in 1,024 lists of similar size, as an index of that many vectors.
        let sizes: Vec<usize> = (0..1024).map(|i| 50 + (i * 7) % 19).collect();
        let total: usize = sizes.iter().sum();
        let (ids, offsets) = lists_of(&sizes, total as u64, 3);
        let chosen = Ids::for_lists(&ids, &offsets);
        let bits = chosen.bits_per_id();
        assert!(matches!(chosen, Ids::PerList(_)));
        assert!((11.0..12.5).contains(&bits), "{bits} bits per id");
        assert!(bits < width_for(total as u32 - 1) as f64);
        assert_eq!(chosen.section_bytes(), chosen.section_words().len() * 8);
    }

    #[test]
    fn lists_that_do_not_ascend_or_would_not_shrink_stay_packed() {
        let (mut ids, offsets) = lists_of(&[10, 10, 10], 30, 5);
        ids.swap(12, 13);
        assert!(ListIds::encode(&ids, &offsets).is_none());
        let chosen = Ids::for_lists(&ids, &offsets);
        assert!(matches!(chosen, Ids::Packed { .. }));
        assert_eq!(&chosen.to_u32()[..], &ids[..]);
        // One list of ids 0..n: Elias-Fano takes 2 bits an id, packing fewer for n = 2.
        let small = Ids::for_lists(&[0, 1], &[0, 2]);
        assert!(matches!(small, Ids::Packed { .. }));
    }

    #[test]
    fn bad_elias_fano_sections_are_refused_not_decoded() {
        let (ids, offsets) = lists_of(&[3, 0, 70, 5], 200, 9);
        let good = per_list(&ids, &offsets).words().to_vec();
        let check = |words: Vec<u64>, offsets: &[u64], needle: &str| {
            let err = ListIds::from_section(Section::Owned(words), offsets, 7).unwrap_err();
            assert!(err.to_string().contains(needle), "{err} (wanted {needle})");
        };
        // Universe below the id count, above 2^32, or 0 with ids.
        for u in [0u64, 77, (1 << 32) + 1] {
            let mut w = good.clone();
            w[0] = u;
            check(w, &offsets, "universe");
        }
        // A universe that changes the layout's length.
        let mut w = good.clone();
        w[0] = 1 << 20;
        check(w, &offsets, "need");
        // Short, long, and offsets of other lists.
        check(good[..good.len() - 1].to_vec(), &offsets, "need");
        let mut long = good.clone();
        long.push(0);
        check(long, &offsets, "need");
        check(vec![], &offsets, "empty");
        // Every single bit flipped in the stream: refused, or read back as ids that ascend
        // below the universe (a flip in a low part can give other valid ids).
        let bits = (good.len() - 2) * 64;
        for b in 0..bits {
            let mut w = good.clone();
            w[1 + b / 64] ^= 1 << (b % 64);
            if let Ok(read) = ListIds::from_section(Section::Owned(w), &offsets, 7) {
                let back = Ids::PerList(read).to_u32().into_owned();
                for l in offsets.windows(2) {
                    let list = &back[l[0] as usize..l[1] as usize];
                    assert!(list.windows(2).all(|p| p[0] < p[1]), "bit {b}");
                    assert!(list.iter().all(|&id| (id as u64) < 200), "bit {b}");
                }
            }
        }
        // A high bit moved so that a list's ids stop ascending: the second list of 70 starts
        // at bit 3·L_0 + high part of list 0; rather than compute it, swap two lists' sizes.
        let swapped = [0u64, 70, 70, 73, 78];
        assert!(ListIds::from_section(Section::Owned(good.clone()), &swapped, 7).is_err());
    }

    #[test]
    fn select_in_word_finds_every_set_bit() {
        let mut rng = crate::Rng::new(8);
        let mut words: Vec<u64> = (0..200).map(|_| rng.next_u64()).collect();
        words.extend([1, 1 << 63, u64::MAX, 0xFF00, 0x8000_0000_0000_0001]);
        // Sparse words too, whose set bits sit in a few bytes.
        words.extend((0..100).map(|_| rng.next_u64() & rng.next_u64() & rng.next_u64()));
        for w in words {
            let set: Vec<u32> = (0..64).filter(|b| w >> b & 1 == 1).collect();
            for (k, &b) in set.iter().enumerate() {
                assert_eq!(select_in_word(w, k as u32), b, "{w:#x} k {k}");
            }
        }
    }

    #[test]
    fn widths_follow_the_largest_id() {
        assert_eq!(width_for(0), 1);
        assert_eq!(width_for(1), 1);
        assert_eq!(width_for(2), 2);
        assert_eq!(width_for(65_535), 16);
        assert_eq!(width_for(65_536), 17);
        assert_eq!(width_for(u32::MAX), 32);
    }

    #[test]
    fn bad_packed_sections_are_refused() {
        let words = pack(&[1, 2, 3]);
        let mut wrong_width = words.clone();
        wrong_width[0] = 33;
        let err = Ids::from_packed_section(Section::Owned(wrong_width), 3, 7).unwrap_err();
        assert!(err.to_string().contains("width 33"), "{err}");
        let mut zero = words.clone();
        zero[0] = 0;
        assert!(Ids::from_packed_section(Section::Owned(zero), 3, 7).is_err());
        let short = words[..words.len() - 1].to_vec();
        let err = Ids::from_packed_section(Section::Owned(short), 3, 7).unwrap_err();
        assert!(err.to_string().contains("need"), "{err}");
        assert!(Ids::from_packed_section(Section::Owned(vec![]), 0, 7).is_err());
        // A count that does not match the words.
        assert!(Ids::from_packed_section(Section::Owned(words), 300, 7).is_err());
    }
}
