//! Which outputs a check of a large problem compares with the golden model:
//! running the model whole takes minutes to hours at GEMM 4096³ or attention
//! with N = 4096, so `ferrite compare` and `ferrite bench gpu` check such
//! problems on the same few sampled rows, chosen here.
use ferrite_hw::attention::AttentionProblem;

/// Problems up to this many useful MACs (about two seconds of the golden
/// model) are checked whole.
pub const FULL_CHECK_MACS: u64 = 1 << 31;

/// 16 rows of an `m`-row output, evenly spread, first and last included.
pub fn gemm_rows(m: usize) -> Vec<usize> {
    let mut rows: Vec<usize> = (0..16).map(|i| i * (m - 1) / 15).collect();
    rows.dedup();
    rows
}

/// (head, query) rows of an attention output: the first, middle and last
/// head, each at queries 0, 1, 127, 128, N/2 + 3 and N − 1 (those that exist):
/// block edges of every kernel here, and the rows with the fewest and most
/// keys when causal.
pub fn attention_rows(p: &AttentionProblem) -> Vec<(usize, usize)> {
    let (nh, n) = (p.heads_total(), p.seq_q);
    let mut heads = vec![0, nh / 2, nh - 1];
    heads.dedup();
    let mut queries: Vec<usize> = [0, 1, 127, 128, n / 2 + 3, n - 1].into_iter().filter(|&i| i < n).collect();
    queries.sort_unstable();
    queries.dedup();
    heads.iter().flat_map(|&h| queries.iter().map(move |&i| (h, i))).collect()
}
