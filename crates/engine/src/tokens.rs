//! OpenAI's o200k_base byte-pair encoding, held compactly.
//!
//! Prompt caps and usage estimates count tokens with o200k (SPEC §5). The crates that ship it
//! keep it in forms built for speed: bpe-openai embeds a 32 MB serialized automaton and
//! tiktoken-rs builds three hash maps of owned byte strings (≈ 50 MB resident). loopwright
//! counts a few prompts per stage, so it keeps the ranks as OpenAI publishes them (1.7 MB
//! gzipped, `data/o200k_base.tiktoken.gz`, taken from the bpe-openai crate) and, the first
//! time a count is asked for, unpacks them into one byte buffer, one offset per rank and a
//! table of ranks keyed by their bytes (≈ 4 MB). Pieces are merged lowest rank first, leftmost
//! on ties, exactly as tiktoken does; a heap keeps a long piece (a run of one character an
//! agent printed a million times) at O(n log n). The tests compare every encoding with
//! tiktoken-rs.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::{BuildHasher, RandomState};
use std::io::Read as _;
use std::sync::LazyLock;

use base64::Engine as _;
use hashbrown::HashTable;
use regex_automata::meta::Regex;
use regex_automata::{Anchored, Input};

static RANKS: &[u8] = include_bytes!("../data/o200k_base.tiktoken.gz");

static O200K: LazyLock<Encoding> = LazyLock::new(|| Encoding::o200k().expect("the embedded o200k table is valid"));

/// Why the embedded rank table cannot be used (a defect of this build).
#[derive(Debug, thiserror::Error)]
enum RanksError {
    /// It does not unpack.
    #[error("cannot unpack: {0}")]
    Unpack(String),
    /// A line of it is not `TOKEN RANK` in rank order.
    #[error("line {line}: {reason}")]
    Line { line: usize, reason: String },
    /// It holds more than 4 GiB of tokens.
    #[error("the table is too large")]
    TooLarge,
    /// The pre-tokenizer's pattern does not compile.
    #[error("the pre-tokenizer: {0}")]
    Pretokenizer(String),
}

/// The o200k_base encoding, unpacked on first use.
pub fn o200k() -> &'static Encoding {
    &O200K
}

/// A byte-pair encoding with its pre-tokenizer.
pub struct Encoding {
    /// Every token's bytes, in rank order.
    bytes: Vec<u8>,
    /// `bytes[offsets[r]..offsets[r + 1]]` is the token of rank `r`.
    offsets: Vec<u32>,
    /// Ranks, found by their bytes.
    by_bytes: HashTable<u32>,
    hasher: RandomState,
    split: Pretokenizer,
}

impl Encoding {
    fn o200k() -> Result<Self, RanksError> {
        let mut text = String::new();
        flate2::read::GzDecoder::new(RANKS).read_to_string(&mut text).map_err(|e| RanksError::Unpack(e.to_string()))?;
        let mut bytes = Vec::with_capacity(1 << 21);
        let mut offsets = Vec::with_capacity(200_001);
        offsets.push(0);
        for (line_no, line) in text.lines().enumerate() {
            let at = |reason: String| RanksError::Line { line: line_no + 1, reason };
            let (token, rank) = line.split_once(' ').ok_or_else(|| at("no rank".to_owned()))?;
            if rank.parse::<usize>().ok() != Some(line_no) {
                return Err(at(format!("rank {rank} out of order")));
            }
            base64::engine::general_purpose::STANDARD.decode_vec(token, &mut bytes).map_err(|e| at(e.to_string()))?;
            offsets.push(u32::try_from(bytes.len()).map_err(|_| RanksError::TooLarge)?);
        }
        let hasher = RandomState::new();
        let mut by_bytes = HashTable::with_capacity(offsets.len());
        let token = |r: u32| &bytes[offsets[r as usize] as usize..offsets[r as usize + 1] as usize];
        for rank in 0..u32::try_from(offsets.len() - 1).map_err(|_| RanksError::TooLarge)? {
            by_bytes.insert_unique(hasher.hash_one(token(rank)), rank, |&r| hasher.hash_one(token(r)));
        }
        let split = Pretokenizer::o200k().map_err(|e| RanksError::Pretokenizer(e.to_string()))?;
        Ok(Self { bytes, offsets, by_bytes, hasher, split })
    }

    fn token(&self, rank: u32) -> &[u8] {
        let r = rank as usize;
        &self.bytes[self.offsets[r] as usize..self.offsets[r + 1] as usize]
    }

    fn rank(&self, piece: &[u8]) -> Option<u32> {
        self.by_bytes.find(self.hasher.hash_one(piece), |&r| self.token(r) == piece).copied()
    }

    /// The number of tokens `text` encodes to.
    pub fn count(&self, text: &str) -> usize {
        let mut tokens = Vec::new();
        self.split.pieces(text).fold(0, |n, piece| {
            tokens.clear();
            self.encode_piece(piece.as_bytes(), &mut tokens);
            n + tokens.len()
        })
    }

    /// The tokens of `text`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut tokens = Vec::new();
        for piece in self.split.pieces(text) {
            self.encode_piece(piece.as_bytes(), &mut tokens);
        }
        tokens
    }

    /// The text `tokens` stand for, or `None` when they split a UTF-8 character.
    pub fn decode(&self, tokens: &[u32]) -> Option<String> {
        let mut bytes = Vec::new();
        for &t in tokens {
            if (t as usize) + 1 >= self.offsets.len() {
                return None;
            }
            bytes.extend_from_slice(self.token(t));
        }
        String::from_utf8(bytes).ok()
    }

    /// Merges the bytes of one piece, lowest-ranked pair first and leftmost on a tie.
    fn encode_piece(&self, piece: &[u8], out: &mut Vec<u32>) {
        if let Some(rank) = self.rank(piece) {
            out.push(rank);
            return;
        }
        let n = piece.len();
        // Parts are kept as a linked list of start offsets: `next[i]` is where the part that
        // starts at `i` ends; a merged-away start is dead.
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<Option<usize>> = (0..n).map(|i| i.checked_sub(1)).collect();
        let mut alive = vec![true; n];
        let mut heap = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<_>, start: usize, end: usize| {
            if let Some(rank) = self.rank(&piece[start..end]) {
                heap.push(Reverse((rank, start, end)));
            }
        };
        for i in 0..n.saturating_sub(1) {
            push(&mut heap, i, i + 2);
        }
        while let Some(Reverse((_, start, end))) = heap.pop() {
            let second = next[start];
            // Stale: the part was merged away, or the pair it names has changed since.
            if !alive[start] || second >= n || next[second] != end {
                continue;
            }
            alive[second] = false;
            next[start] = end;
            if end < n {
                prev[end] = Some(start);
                push(&mut heap, start, next[end]);
            }
            if let Some(before) = prev[start] {
                push(&mut heap, before, end);
            }
        }
        let mut start = 0;
        while start < n {
            let end = next[start];
            out.push(self.rank(&piece[start..end]).expect("every part left after merging is a token"));
            start = end;
        }
    }
}

/// o200k's pre-tokenizer: the text is cut into pieces that are encoded apart. Its pattern has a
/// look-ahead (`\s+(?!\S)`) that the `regex` engines lack; as bpe-openai does, a second
/// pattern `\s+\s` matches one character too many and that character is given back.
struct Pretokenizer {
    regex: Regex,
    /// Per pattern: whether its last character is the look-ahead.
    lookahead: [bool; 3],
}

impl Pretokenizer {
    fn o200k() -> Result<Self, Box<regex_automata::meta::BuildError>> {
        let words = [
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
            r"\p{N}{1,3}",
            r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
            r"\s*[\r\n]+",
            r"\s+$",
        ]
        .join("|");
        let regex = Regex::new_many(&[words.as_str(), r"\s+\s", r"\s+"]).map_err(Box::new)?;
        Ok(Self { regex, lookahead: [false, true, false] })
    }

    fn pieces<'t>(&'t self, text: &'t str) -> impl Iterator<Item = &'t str> + 't {
        let mut at = 0;
        std::iter::from_fn(move || {
            let found = self.regex.find(Input::new(&text[at..]).anchored(Anchored::Yes))?;
            let start = at;
            let mut end = at + found.end();
            if self.lookahead[found.pattern().as_usize()] {
                end -= text[start..end].chars().next_back().map_or(0, char::len_utf8);
            }
            if end == start {
                return None;
            }
            at = end;
            Some(&text[start..end])
        })
    }
}

/// Counts tokens (OpenAI o200k encoding; for other models an estimate).
pub fn count_tokens(text: &str) -> usize {
    if text.is_empty() {
        return 0;
    }
    o200k().count(text)
}

/// Shortens `text` to at most `cap` tokens by cutting from the middle: the beginning (where a
/// summary stands) and the most recent content at the end are kept, with the marker
/// `[truncated - N tokens omitted]` where the cut was. Returns the text and its token count.
pub fn cap_tokens(text: &str, cap: usize) -> (String, usize) {
    let encoding = o200k();
    let tokens = encoding.encode(text);
    if tokens.len() <= cap {
        return (text.to_owned(), tokens.len());
    }
    let keep = cap.saturating_sub(12); // room for the marker
    let head = keep / 3;
    let tail = keep - head;
    let omitted = tokens.len() - head - tail;
    let text = format!(
        "{}\n[truncated - {omitted} tokens omitted]\n{}",
        decode_lossy(&tokens[..head]).trim_end(),
        decode_lossy(&tokens[tokens.len() - tail..]).trim_start()
    );
    let count = encoding.count(&text);
    (text, count)
}

/// Decodes `tokens`; a cut that split a multi-byte character drops the partial token(s) at
/// either end.
fn decode_lossy(tokens: &[u32]) -> String {
    let encoding = o200k();
    if let Some(s) = encoding.decode(tokens) {
        return s;
    }
    for trim in 1..=3.min(tokens.len()) {
        if let Some(s) = encoding.decode(&tokens[trim..]) {
            return s;
        }
        if let Some(s) = encoding.decode(&tokens[..tokens.len() - trim]) {
            return s;
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts() -> Vec<String> {
        let mut texts: Vec<String> = [
            "",
            "hello world",
            "Hello, World! It's 2026-11-23; we're done.\n\n\n   indented\tand tabs\r\n",
            "   leading spaces and trailing   ",
            "日本語のテキストと中文混合, émigré naïve café, Ελληνικά, русский текст",
            "emoji 👩‍👩‍👧‍👦 🚀🚀🚀 and combining e\u{301}\u{301}",
            "fn main() { let x: Vec<u32> = (0..10).map(|i| i * 2).collect(); }",
            "123456789012345 1,000,000.50 0x1f2e3d",
            "path/to/file.rs:42:7 error[E0308]: mismatched types\n  --> src/main.rs",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        texts.push("a".repeat(5000));
        texts.push(" ".repeat(3000) + "x");
        texts.push("ab".repeat(2000));
        texts.push("\n".repeat(100) + "  \n \t\n");
        // Real prose and code: this crate's own sources, whole and in ragged slices.
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        for name in ["tokens.rs", "prompt.rs", "decide/mod.rs", "run/mod.rs", "run/evaluate.rs"] {
            let text = std::fs::read_to_string(format!("{root}/{name}")).expect("read source");
            let chars: Vec<char> = text.chars().collect();
            for (i, len) in [(0, 10), (7, 101), (333, 1000), (1001, 4097)] {
                texts.push(chars.iter().skip(i).take(len).collect());
            }
            texts.push(text);
        }
        // A deterministic jumble of code points from many scripts.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut jumble = String::new();
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let pick = [0x20, 0x41, 0x61, 0x30, 0xe9, 0x3b1, 0x430, 0x4e00, 0x1f600, 0x0a][(seed % 10) as usize];
            jumble.extend(char::from_u32(pick + ((seed >> 8) % 26) as u32));
        }
        texts.push(jumble);
        texts
    }

    #[test]
    fn encodes_exactly_as_tiktoken_does() {
        let reference = tiktoken_rs::o200k_base().expect("tiktoken's o200k");
        for text in texts() {
            let ours = o200k().encode(&text);
            let theirs = reference.encode_ordinary(&text);
            assert_eq!(ours, theirs, "encoding of {:?}", text.chars().take(80).collect::<String>());
            assert_eq!(o200k().count(&text), theirs.len());
            assert_eq!(o200k().decode(&ours).as_deref(), Some(text.as_str()));
        }
    }

    #[test]
    fn a_long_run_of_one_character_is_merged_in_n_log_n() {
        let reference = tiktoken_rs::o200k_base().expect("tiktoken's o200k");
        let short = "z".repeat(8192);
        assert_eq!(o200k().encode(&short), reference.encode_ordinary(&short));
        // tiktoken's own merge is quadratic here; this one finishes at once.
        let long = "z".repeat(1 << 20);
        let tokens = o200k().encode(&long);
        assert_eq!(o200k().decode(&tokens), Some(long));
    }

    #[test]
    fn decode_refuses_a_split_character_and_an_unknown_rank() {
        let lead_byte = o200k().rank(&[0xe6]).expect("every byte is a token");
        assert_eq!(o200k().decode(&[lead_byte]), None);
        assert_eq!(o200k().decode(&[u32::MAX]), None);
    }
}
