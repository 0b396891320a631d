//! Caller ids in list order, stored with as few bits as the largest id needs.
//!
//! An index maps each list position back to the caller's id. Format version 3 packs them at a
//! fixed width `w` = the bit length of the largest id (1..=32): 16 bits for up to 65,536
//! vectors, 20 for a million, instead of 32 each. Older files hold plain `u32` ids and are read
//! as they are. Only the final results of a search look ids up, so unpacking costs nothing
//! measurable.
//!
//! Packed layout, as little-endian `u64` words: word 0 is `w`; then the bit stream in which id
//! `i` occupies bits `i·w .. i·w + w` (bit `b` of the stream is bit `b % 64` of word
//! `1 + b / 64`), then one zero word so that reading any id touches two whole words.

use crate::error::{Result, VlcError};
use crate::format::Section;
use std::borrow::Cow;

/// Ids in list order: plain `u32` (format versions 1 and 2) or bit-packed (version 3).
pub enum Ids {
    /// Layout: (num_vectors,).
    Plain(Section<u32>),
    /// Layout: see the module docs; `num` ids.
    Packed { words: Section<u64>, num: usize },
}

impl std::fmt::Debug for Ids {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ids")
            .field("len", &self.len())
            .field("width", &self.width())
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

    pub fn len(&self) -> usize {
        match self {
            Ids::Plain(ids) => ids.len(),
            Ids::Packed { num, .. } => *num,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bits each id takes in the file.
    pub fn width(&self) -> u32 {
        match self {
            Ids::Plain(_) => 32,
            Ids::Packed { words, .. } => words[0] as u32,
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
        }
    }

    /// All ids, in list order, as `u32` (borrowed when stored plain).
    pub fn to_u32(&self) -> Cow<'_, [u32]> {
        match self {
            Ids::Plain(ids) => Cow::Borrowed(&ids[..]),
            Ids::Packed { num, .. } => Cow::Owned((0..*num).map(|p| self.get(p)).collect()),
        }
    }

    /// The packed section's words (packing plain ids on the way).
    pub fn packed_words(&self) -> Cow<'_, [u64]> {
        match self {
            Ids::Plain(ids) => Cow::Owned(pack(ids)),
            Ids::Packed { words, .. } => Cow::Borrowed(&words[..]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                assert_eq!(packed.width(), width);
                assert_eq!(packed.len(), num);
                let words = packed.packed_words().into_owned();
                assert_eq!(words.len(), packed_len(num, width).unwrap());
                assert_eq!(*words.last().unwrap(), 0, "padding word");
                for (p, &id) in ids.iter().enumerate() {
                    assert_eq!(packed.get(p), id, "num {num} max {max} position {p}");
                }
                assert_eq!(&packed.to_u32()[..], &ids[..]);
                // Plain ids pack to the same words.
                let plain = Ids::Plain(Section::Owned(ids.clone()));
                assert_eq!(plain.packed_words().into_owned(), words);
                // And a section read back is accepted.
                let back = Ids::from_packed_section(Section::Owned(words), num, 0).unwrap();
                assert_eq!(&back.to_u32()[..], &ids[..]);
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
