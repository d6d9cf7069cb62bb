//! The learned fallback (SPEC §6 "Sure, unsure, unclassified"): a linear classifier over hashed
//! TF-IDF features of a failure's output — character 2–5-grams of words, words and word pairs — and of
//! what loopwright knows of the command (the tools it runs, its exit code or signal, the check's
//! type), read by a multinomial logistic regression whose probabilities are calibrated.
//!
//! It is asked only when no pattern is sure. Its weights are trained from `corpus/` by
//! `cargo run --release -p loopwright-engine --example train-classifier` (seeded, reproducible)
//! on the tools the patterns are tuned on, never on the held-out tools, and embedded in the
//! binary (`model.bin`); nothing is downloaded at run time. The same [`features`] serve
//! training and classifying, so they cannot drift apart.
//!
//! The cost is linear in the output and bounded: only the first [`HEAD`] and the last [`TAIL`]
//! bytes are read.

use std::sync::LazyLock;

use super::Context;

/// Hash buckets of the feature space.
pub const BUCKETS: usize = 1 << 16;
/// Bytes read from the start of an output.
pub const HEAD: usize = 4 * 1024;
/// Bytes read from its end (errors and summaries come last).
pub const TAIL: usize = 28 * 1024;
/// The class of an output that shows no failure.
pub const NONE: &str = "none";

const MAGIC: &[u8; 8] = b"LWCLS001";
static EMBEDDED: &[u8] = include_bytes!("model.bin");

/// The feature groups; each is normalised on its own, so a long log's many n-grams do not
/// drown the few facts of its context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Group {
    /// Character 2- to 5-grams of each word.
    Chars = 1,
    /// Words and pairs of adjacent words.
    Words = 2,
    /// The command's tools, exit code or signal, check type and loopwright's timeout.
    Context = 3,
}

/// The groups, in order.
pub const GROUPS: [Group; 3] = [Group::Chars, Group::Words, Group::Context];
/// The length of each group's vector. Chosen by the trainer's folds over the tuned tools
/// (never the held-out ones): character n-grams at twice the weight of words and context read
/// tools they did not see best (out-of-fold top-1 71.6 % against 68.9 % at equal weights).
const GROUP_WEIGHTS: [f32; 3] = [2.0, 1.0, 1.0];

/// Term counts of one output, by group and bucket.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// `(group index, bucket, count)`, sorted and merged.
    pub terms: Vec<(u8, u32, f32)>,
}

/// The bucket of a feature: FNV-1a of its group and its bytes.
fn fnv(group: Group, bytes: &[u8]) -> u32 {
    let mut hash = crate::hash::Fnv::default();
    hash.feed(&[group as u8]);
    hash.feed(bytes);
    let h = hash.finish();
    // Fold the high bits in: FNV's low bits alone spread short keys poorly.
    ((h ^ (h >> 32)) as usize % BUCKETS) as u32
}

/// The part of an output that is read: its head and its tail, on character boundaries.
fn window(text: &str) -> (&str, &str) {
    if text.len() <= HEAD + TAIL {
        return (text, "");
    }
    let mut head = HEAD;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - TAIL;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    (&text[..head], &text[tail..])
}

/// A URL: its host and path name one server, not a kind of failure (the corpus's rate-limit
/// cases all asked `/v1/chat/completions`, and a first model took any such URL for a rate
/// limit); it is read as the one word `url`.
static URL: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s'\x22<>()]+").expect("a valid URL regex"));

/// A line as features see it: URLs one word, lower case, every digit `0` (line numbers, sizes
/// and times vary from run to run of the same error), runs of blanks one space.
fn normalise(line: &str, out: &mut Vec<u8>) {
    out.clear();
    out.push(b' ');
    let line = URL.replace_all(line, " url ");
    for b in line.bytes() {
        let b = match b {
            b'0'..=b'9' => b'0',
            b' ' | b'\t' | b'\r' => b' ',
            b => b.to_ascii_lowercase(),
        };
        if !(b == b' ' && out.last() == Some(&b' ')) {
            out.push(b);
        }
    }
    if out.last() != Some(&b' ') {
        out.push(b' ');
    }
}

/// The term counts of an output with its context.
pub fn features(text: &str, context: &Context) -> Counts {
    let text = super::strip_ansi(text);
    let (head, tail) = window(&text);
    let mut terms: Vec<(u8, u32, f32)> = Vec::with_capacity(4 * (head.len() + tail.len()) + 16);
    let mut line_bytes = Vec::with_capacity(256);
    let mut pair = Vec::with_capacity(64);
    let mut padded = Vec::with_capacity(64);
    for line in head.lines().chain(tail.lines()) {
        let line = super::truncate(line, super::MAX_LINE);
        normalise(line, &mut line_bytes);
        if line_bytes.len() <= 2 {
            continue;
        }
        // Character n-grams of each word with a space either side (so `err` at a word's start
        // differs from inside one).
        for word in line_bytes.split(|b| *b == b' ').filter(|w| !w.is_empty()) {
            padded.clear();
            padded.push(b' ');
            padded.extend_from_slice(word);
            padded.push(b' ');
            for n in 2..=5 {
                for gram in padded.windows(n) {
                    terms.push((0, fnv(Group::Chars, gram), 1.0));
                }
            }
        }
        let mut previous: Option<&[u8]> = None;
        for word in
            line_bytes.split(|b| !(b.is_ascii_alphanumeric() || *b == b'_' || *b >= 0x80)).filter(|w| !w.is_empty())
        {
            terms.push((1, fnv(Group::Words, word), 1.0));
            if let Some(p) = previous {
                pair.clear();
                pair.extend_from_slice(p);
                pair.push(b' ');
                pair.extend_from_slice(word);
                terms.push((1, fnv(Group::Words, &pair), 1.0));
            }
            previous = Some(word);
        }
    }
    for token in context_tokens(context) {
        terms.push((2, fnv(Group::Context, token.as_bytes()), 1.0));
    }
    terms.sort_unstable_by_key(|&(g, b, _)| (g, b));
    let mut merged: Vec<(u8, u32, f32)> = Vec::with_capacity(terms.len() / 2);
    for (g, b, c) in terms {
        match merged.last_mut() {
            Some(last) if last.0 == g && last.1 == b => last.2 += c,
            _ => merged.push((g, b, c)),
        }
    }
    Counts { terms: merged }
}

/// What is known of the command, as words: `tool=pytest`, `exit=1`, `exit=failed`,
/// `check=test`, `signal=SIGKILL`, `timeout`.
pub fn context_tokens(context: &Context) -> Vec<String> {
    let mut tokens = Vec::new();
    if let Some(command) = &context.command {
        for tool in super::command::tools(command) {
            if let Some(first) = tool.first() {
                tokens.push(format!("tool={first}"));
            }
            if tool.len() > 1 {
                tokens.push(format!("tool={}", tool.join(" ")));
            }
        }
    }
    match (context.ending_signal(), context.exit_code) {
        (Some(signal), _) => tokens.push(format!("signal={signal}")),
        (None, Some(code)) => {
            tokens.push(format!("exit={code}"));
            tokens.push(if code == 0 { "exit=passed" } else { "exit=failed" }.to_owned());
        }
        (None, None) => {}
    }
    if let Some(check) = &context.check_type {
        tokens.push(format!("check={}", check.to_lowercase()));
    }
    if context.timed_out {
        tokens.push("timeout".to_owned());
    }
    tokens
}

/// TF-IDF of counts: `(1 + ln tf) · idf`, each group scaled to unit length, then the groups
/// added into one vector of [`BUCKETS`] (the group is part of every feature's hash).
pub fn weigh(counts: &Counts, idf: &[f32]) -> Vec<(usize, f32)> {
    let mut norms = [0.0f32; GROUPS.len()];
    let values: Vec<f32> = counts
        .terms
        .iter()
        .map(|&(g, b, tf)| {
            let v = (1.0 + tf.ln()) * idf[b as usize];
            norms[usize::from(g)] += v * v;
            v
        })
        .collect();
    let mut out: Vec<(usize, f32)> = counts
        .terms
        .iter()
        .zip(values)
        .map(|(&(g, b, _), v)| {
            (b as usize, GROUP_WEIGHTS[usize::from(g)] * v / norms[usize::from(g)].sqrt().max(f32::MIN_POSITIVE))
        })
        .collect();
    out.sort_unstable_by_key(|(i, _)| *i);
    out.dedup_by(|next, kept| {
        let same = next.0 == kept.0;
        if same {
            kept.1 += next.1;
        }
        same
    });
    out
}

/// A trained model: IDF per feature, weights per feature and class (quantised to 8 bits with a
/// scale per class), a bias per class, the calibration temperature and the threshold below
/// which a proposal is not made.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// The classes, [`NONE`] among them.
    pub classes: Vec<String>,
    /// IDF of each of the [`BUCKETS`] features.
    pub idf: Vec<f32>,
    /// Weights, feature-major: `weights[feature * classes + class]`.
    pub weights: Vec<i8>,
    /// The scale of each class's quantised weights.
    pub scales: Vec<f32>,
    /// Bias per class.
    pub bias: Vec<f32>,
    /// Logits are divided by it before the softmax (fitted on held-out folds).
    pub temperature: f32,
    /// A proposal needs at least this probability.
    pub threshold: f32,
}

/// What the model proposes.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// The class (a pattern id, or [`NONE`]).
    pub class: String,
    /// Its calibrated probability.
    pub probability: f64,
    /// The model's threshold: below it the proposal is not used.
    pub threshold: f64,
}

/// The model built into the binary.
pub fn builtin() -> &'static Model {
    static MODEL: LazyLock<Model> =
        LazyLock::new(|| Model::read(EMBEDDED).expect("the embedded model was written by train-classifier"));
    &MODEL
}

impl Model {
    /// Class probabilities of an output, in class order.
    pub fn probabilities(&self, text: &str, context: &Context) -> Vec<f64> {
        let x = weigh(&features(text, context), &self.idf);
        let c = self.classes.len();
        let mut sums = vec![0.0f32; c];
        for (i, v) in x {
            let row = &self.weights[i * c..(i + 1) * c];
            for (s, w) in sums.iter_mut().zip(row) {
                *s += v * f32::from(*w);
            }
        }
        let logits: Vec<f64> = sums
            .iter()
            .zip(&self.scales)
            .zip(&self.bias)
            .map(|((s, scale), b)| f64::from((s * scale + b) / self.temperature))
            .collect();
        softmax(&logits)
    }

    /// The likeliest class with its probability.
    pub fn propose(&self, text: &str, context: &Context) -> Proposal {
        let p = self.probabilities(text, context);
        let (best, probability) =
            p.iter().copied().enumerate().max_by(|a, b| a.1.total_cmp(&b.1)).expect("a model has classes");
        Proposal { class: self.classes[best].clone(), probability, threshold: f64::from(self.threshold) }
    }

    /// The model as `train-classifier` writes it.
    pub fn write(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.idf.len() * 4 + self.weights.len() + 1024);
        out.extend_from_slice(MAGIC);
        let put_u32 =
            |out: &mut Vec<u8>, v: usize| out.extend_from_slice(&u32::try_from(v).expect("small").to_le_bytes());
        put_u32(&mut out, BUCKETS);
        put_u32(&mut out, self.classes.len());
        for class in &self.classes {
            put_u32(&mut out, class.len());
            out.extend_from_slice(class.as_bytes());
        }
        for v in [self.temperature, self.threshold].iter().chain(&self.scales).chain(&self.bias).chain(&self.idf) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend(self.weights.iter().map(|w| w.to_le_bytes()[0]));
        out
    }

    /// Reads a model written by [`Model::write`].
    pub fn read(bytes: &[u8]) -> Result<Self, ModelError> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(8)? != MAGIC {
            return Err(ModelError::NotAModel);
        }
        let (buckets, n) = (r.u32()?, r.u32()?);
        if buckets != BUCKETS || n == 0 || n > 64 {
            return Err(ModelError::Misfit { buckets, classes: n });
        }
        let mut classes = Vec::with_capacity(n);
        for _ in 0..n {
            let len = r.u32()?;
            classes.push(String::from_utf8(r.take(len)?.to_vec()).map_err(|_| ModelError::ClassName)?);
        }
        let head = r.f32s(2)?;
        let (scales, bias, idf) = (r.f32s(n)?, r.f32s(n)?, r.f32s(BUCKETS)?);
        let weights = r.take(BUCKETS * n)?.iter().map(|b| i8::from_le_bytes([*b])).collect();
        if r.at != bytes.len() {
            return Err(ModelError::PastEnd);
        }
        Ok(Self { classes, idf, weights, scales, bias, temperature: head[0], threshold: head[1] })
    }
}

/// Why a model file cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// It does not start as a model does.
    #[error("not a loopwright classifier")]
    NotAModel,
    /// It was trained for another build.
    #[error("a model of {buckets} buckets and {classes} classes does not fit this build")]
    Misfit {
        /// Its feature buckets.
        buckets: usize,
        /// Its classes.
        classes: usize,
    },
    /// A class's name is not UTF-8.
    #[error("a class name in the model file is not UTF-8")]
    ClassName,
    /// It ends before its last field.
    #[error("the model file is cut short")]
    CutShort,
    /// It goes on after its last field.
    #[error("the model file has bytes past its end")]
    PastEnd,
}

/// Reads a model file front to back.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ModelError> {
        let s = self.bytes.get(self.at..self.at + n).ok_or(ModelError::CutShort)?;
        self.at += n;
        Ok(s)
    }

    fn u32(&mut self) -> Result<usize, ModelError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize)
    }

    fn f32s(&mut self, count: usize) -> Result<Vec<f32>, ModelError> {
        Ok(self.take(count * 4)?.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
    }
}

/// Softmax, stable.
pub fn softmax(logits: &[f64]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exp: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
    let sum: f64 = exp.iter().sum();
    exp.into_iter().map(|e| e / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_read_the_head_and_tail_and_the_context() {
        let cx = Context {
            command: Some("npx eslint src".into()),
            exit_code: Some(1),
            check_type: Some("Lint".into()),
            ..Context::default()
        };
        let tokens = context_tokens(&cx);
        for want in ["tool=eslint", "exit=1", "exit=failed", "check=lint"] {
            assert!(tokens.iter().any(|t| t == want), "{want} in {tokens:?}");
        }
        let killed = Context { exit_code: Some(137), ..Context::default() };
        assert_eq!(context_tokens(&killed), ["signal=SIGKILL"]);
        // Digits do not matter: line 12 and line 99 are the same error.
        assert_eq!(features("a.py:12: error: x\n", &cx), features("a.py:99: error: x\n", &cx));
        assert_ne!(features("a.py:12: error: x\n", &cx), features("a.py:12: error: y\n", &cx));
        // A long output is read at its ends only: the tail counts, the middle does not.
        let big = format!("{}\n{}{}", "a".repeat(HEAD), "b\n".repeat(20_000), "c".repeat(10));
        let other_tail = format!("{}\n{}{}", "a".repeat(HEAD), "b\n".repeat(20_000), "d".repeat(10));
        assert_ne!(features(&big, &cx), features(&other_tail, &cx), "the tail is read");
        let other_middle = big.replacen("b\nb\n", "z\nz\n", 1);
        assert_ne!(big, other_middle);
        assert_eq!(features(&big, &cx), features(&other_middle, &cx), "the middle is not");
    }

    #[test]
    fn the_embedded_model_reads_back_and_gives_probabilities() {
        let m = builtin();
        assert!(m.classes.iter().any(|c| c == NONE));
        assert_eq!(Model::read(&m.write()).as_ref(), Ok(m));
        let p = m.probabilities("error: something\n", &Context::default());
        assert_eq!(p.len(), m.classes.len());
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        assert_eq!(Model::read(b"LWCLS001\x00").err(), Some(ModelError::CutShort));
        assert_eq!(Model::read(b"nothing at all").err(), Some(ModelError::NotAModel));
        assert_eq!(ModelError::CutShort.to_string(), "the model file is cut short");
    }
}
