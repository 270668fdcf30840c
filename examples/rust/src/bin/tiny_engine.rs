//! A toy llama-style engine in Rust (2 layers, GQA, RoPE, SwiGLU, greedy decoding; made-up
//! weights), tapped through the safe bindings: the same model as examples/c_engine_tap.c, so
//! `tapdiff diff` of the two traces passes. A batched prefill records N_PROMPT rows per tap,
//! each decode step one row; the logits only for the last position of a step.
//!
//!   tiny_engine OUT.h5 [NAME_GLOBS]
use tapdiff::{Config, Dims, Hparam, TraceWriter};

const N_LAYER: usize = 2;
const N_EMBD: usize = 8;
const N_HEAD: usize = 2;
const N_HEAD_KV: usize = 1;
const HEAD_DIM: usize = 4;
const N_FF: usize = 16;
const N_VOCAB: usize = 32;
const N_PROMPT: usize = 3;
const N_PREDICT: usize = 4;
const N_CTX: usize = N_PROMPT + N_PREDICT;
const Q_DIM: usize = N_HEAD * HEAD_DIM;
const KV_DIM: usize = N_HEAD_KV * HEAD_DIM;

fn weight(matrix: usize, row: usize, col: usize) -> f32 {
    (((matrix * 31 + row * 7 + col * 3) % 11) as f32 - 5.0) * 0.05
}

fn matvec(matrix: usize, rows: usize, x: &[f32]) -> Vec<f32> {
    (0..rows).map(|r| x.iter().enumerate().fold(0.0f32, |sum, (c, v)| sum + weight(matrix, r, c) * v)).collect()
}

fn rmsnorm(x: &[f32]) -> Vec<f32> {
    let ss = x.iter().fold(0.0f32, |s, v| s + v * v);
    let scale = 1.0 / (ss / N_EMBD as f32 + 1e-5).sqrt();
    x.iter().map(|v| v * scale).collect()
}

/// The residual add: x += y, row by row.
fn add_into(x: &mut [Vec<f32>], y: &[Vec<f32>]) {
    for (xr, yr) in x.iter_mut().zip(y) {
        xr.iter_mut().zip(yr).for_each(|(a, b)| *a += b);
    }
}

/// RoPE, adjacent pairs.
fn rope(v: &mut [f32], pos: usize) {
    for head in v.chunks_mut(HEAD_DIM) {
        for i in (0..HEAD_DIM).step_by(2) {
            let angle = pos as f32 * 10000.0f32.powf(-(i as f32) / HEAD_DIM as f32);
            let (a, b) = (head[i], head[i + 1]);
            head[i] = a * angle.cos() - b * angle.sin();
            head[i + 1] = a * angle.sin() + b * angle.cos();
        }
    }
}

struct Engine {
    trace: TraceWriter,
    k_cache: Vec<Vec<[f32; KV_DIM]>>,
    v_cache: Vec<Vec<[f32; KV_DIM]>>,
}

impl Engine {
    fn tap(&mut self, name: &str, layer: i32, first: usize, rows: &[Vec<f32>], shape: &[i64]) -> Result<(), tapdiff::Error> {
        if !self.trace.enabled(name, layer, first as i64, rows.len() as i64) {
            return Ok(());
        }
        let flat: Vec<f32> = rows.concat();
        self.trace.record(name, layer, first as i64, rows.len() as i64, shape, &flat)
    }

    /// Positions first..first+n (tokens[first..]); the argmax of the last position's logits.
    fn forward(&mut self, tokens: &[i32], first: usize, n: usize) -> Result<i32, tapdiff::Error> {
        let e = [N_EMBD as i64];
        let mut x: Vec<Vec<f32>> =
            (0..n).map(|r| (0..N_EMBD).map(|i| tokens[first + r] as f32 + i as f32 / 8.0).collect()).collect();
        self.tap("token_embd", -1, first, &x, &e)?;
        for l in 0..N_LAYER {
            let layer = l as i32;
            let norm: Vec<Vec<f32>> = x.iter().map(|v| rmsnorm(v)).collect();
            self.tap("attn_norm", layer, first, &norm, &e)?;
            let mut q: Vec<Vec<f32>> = norm.iter().map(|v| matvec(10 * l, Q_DIM, v)).collect();
            let mut k: Vec<Vec<f32>> = norm.iter().map(|v| matvec(10 * l + 1, KV_DIM, v)).collect();
            let v: Vec<Vec<f32>> = norm.iter().map(|v| matvec(10 * l + 2, KV_DIM, v)).collect();
            self.tap("attn_q", layer, first, &q, &[Q_DIM as i64])?;
            self.tap("attn_k", layer, first, &k, &[KV_DIM as i64])?;
            self.tap("attn_v", layer, first, &v, &[KV_DIM as i64])?;
            for r in 0..n {
                rope(&mut q[r], first + r);
                rope(&mut k[r], first + r);
                self.k_cache[l][first + r].copy_from_slice(&k[r]);
                self.v_cache[l][first + r].copy_from_slice(&v[r]);
            }
            self.tap("attn_q.rope", layer, first, &q, &[Q_DIM as i64])?;
            self.tap("attn_k.rope", layer, first, &k, &[KV_DIM as i64])?;
            let kv_k: Vec<Vec<f32>> = (first..first + n).map(|p| self.k_cache[l][p].to_vec()).collect();
            let kv_v: Vec<Vec<f32>> = (first..first + n).map(|p| self.v_cache[l][p].to_vec()).collect();
            self.tap("kv.k", layer, first, &kv_k, &[KV_DIM as i64])?;
            self.tap("kv.v", layer, first, &kv_v, &[KV_DIM as i64])?;
            let mut probs = vec![vec![0.0f32; N_HEAD * N_CTX]; n];
            let mut att = vec![vec![0.0f32; Q_DIM]; n];
            for r in 0..n {
                let pos = first + r;
                for h in 0..N_HEAD {
                    let kv = h / (N_HEAD / N_HEAD_KV);
                    let p = &mut probs[r][h * N_CTX..(h + 1) * N_CTX];
                    let mut max = -1e30f32;
                    for j in 0..=pos {
                        let mut dot = 0.0f32;
                        for i in 0..HEAD_DIM {
                            dot += q[r][h * HEAD_DIM + i] * self.k_cache[l][j][kv * HEAD_DIM + i];
                        }
                        p[j] = dot / (HEAD_DIM as f32).sqrt();
                        max = max.max(p[j]);
                    }
                    let mut sum = 0.0f32;
                    for j in 0..=pos {
                        p[j] = (p[j] - max).exp();
                        sum += p[j];
                    }
                    for j in 0..=pos {
                        p[j] /= sum;
                    }
                    for i in 0..HEAD_DIM {
                        let mut acc = 0.0f32;
                        for j in 0..=pos {
                            acc += p[j] * self.v_cache[l][j][kv * HEAD_DIM + i];
                        }
                        att[r][h * HEAD_DIM + i] = acc;
                    }
                }
            }
            self.tap("attn.probs", layer, first, &probs, &[N_HEAD as i64, N_CTX as i64])?;
            self.tap("attn.out", layer, first, &att, &[Q_DIM as i64])?;
            let proj: Vec<Vec<f32>> = att.iter().map(|a| matvec(10 * l + 3, N_EMBD, a)).collect();
            self.tap("attn_output", layer, first, &proj, &e)?;
            add_into(&mut x, &proj);
            self.tap("resid.attn", layer, first, &x, &e)?;
            let norm: Vec<Vec<f32>> = x.iter().map(|v| rmsnorm(v)).collect();
            self.tap("ffn_norm", layer, first, &norm, &e)?;
            let gate: Vec<Vec<f32>> = norm.iter().map(|v| matvec(10 * l + 4, N_FF, v)).collect();
            let up: Vec<Vec<f32>> = norm.iter().map(|v| matvec(10 * l + 5, N_FF, v)).collect();
            self.tap("ffn_gate", layer, first, &gate, &[N_FF as i64])?;
            self.tap("ffn_up", layer, first, &up, &[N_FF as i64])?;
            let act: Vec<Vec<f32>> = gate
                .iter()
                .zip(&up)
                .map(|(g, u)| g.iter().zip(u).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect())
                .collect();
            self.tap("ffn.act", layer, first, &act, &[N_FF as i64])?;
            let proj: Vec<Vec<f32>> = act.iter().map(|a| matvec(10 * l + 6, N_EMBD, a)).collect();
            self.tap("ffn_down", layer, first, &proj, &e)?;
            add_into(&mut x, &proj);
            self.tap("resid.ffn", layer, first, &x, &e)?;
        }
        let norm: Vec<Vec<f32>> = x.iter().map(|v| rmsnorm(v)).collect();
        self.tap("output_norm", -1, first, &norm, &e)?;
        let logits = matvec(99, N_VOCAB, &norm[n - 1]);
        self.tap("output", -1, first + n - 1, &[logits.clone()], &[N_VOCAB as i64])?;
        let mut best = 0;
        for i in 1..N_VOCAB {
            if logits[i] > logits[best] {
                best = i;
            }
        }
        Ok(best as i32)
    }
}

fn run(path: &str, filter: Option<String>) -> Result<(), tapdiff::Error> {
    let mut tokens = vec![5, 17, 3];
    let mut config = Config::external("tiny_engine (Rust) 1.0", N_PROMPT as i64);
    config.model_path = "toy-llama (built in)".into();
    config.tokens = tokens.clone();
    config.filter_names = filter;
    config.hparams = vec![
        ("arch".into(), Hparam::Text("toy-llama".into())),
        ("n_layer".into(), Hparam::Int(N_LAYER as i64)),
        ("rope_freq_base".into(), Hparam::Float(10000.0)),
    ];
    config.dims = Dims {
        n_layer: N_LAYER as i64,
        n_embd: N_EMBD as i64,
        n_head: N_HEAD as i64,
        n_head_kv: N_HEAD_KV as i64,
        head_dim: HEAD_DIM as i64,
        n_ff: N_FF as i64,
        n_vocab: N_VOCAB as i64,
        n_ctx: N_CTX as i64,
    };
    let trace = TraceWriter::create(path, &config)?;
    let mut engine = Engine { trace, k_cache: vec![vec![[0.0; KV_DIM]; N_CTX]; N_LAYER], v_cache: vec![vec![[0.0; KV_DIM]; N_CTX]; N_LAYER] };
    let mut next = engine.forward(&tokens, 0, N_PROMPT)?;
    engine.trace.end_step()?;
    for pos in N_PROMPT..N_CTX {
        tokens.push(next);
        engine.trace.append_tokens(&[next])?;
        next = engine.forward(&tokens, pos, 1)?;
        engine.trace.end_step()?;
    }
    engine.trace.close()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 2 || args.len() > 3 {
        eprintln!("usage: tiny_engine OUT.h5 [NAME_GLOBS]");
        std::process::exit(2);
    }
    if let Err(e) = run(&args[1], args.get(2).cloned()) {
        eprintln!("tiny_engine: {e}");
        std::process::exit(2);
    }
}
