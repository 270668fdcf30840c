//! Safe bindings to tapdiff's C trace ABI (`tapdiff/trace.h`): an engine written in Rust records
//! its taps into a tapdiff trace that `tapdiff diff` compares with any other producer's.
//!
//! ```no_run
//! let mut trace = tapdiff::TraceWriter::create("run.h5", &tapdiff::Config::external("my-engine", 3))?;
//! trace.record("attn_q", 0, 0, 3, &[8], &[0.0f32; 24])?;
//! trace.end_step()?;
//! trace.close()?;
//! # Ok::<(), tapdiff::Error>(())
//! ```

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};
use std::fmt;

mod ffi {
    use std::os::raw::{c_char, c_int};

    #[repr(C)]
    pub struct Trace {
        _private: [u8; 0],
    }

    #[repr(C)]
    pub struct Hparam {
        pub key: *const c_char,
        pub kind: c_int, // 0 int, 1 float, 2 string
        pub int_value: i64,
        pub float_value: f64,
        pub string_value: *const c_char,
    }

    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct Dims {
        pub n_layer: i64,
        pub n_embd: i64,
        pub n_head: i64,
        pub n_head_kv: i64,
        pub head_dim: i64,
        pub n_ff: i64,
        pub n_vocab: i64,
        pub n_ctx: i64,
    }

    #[repr(C)]
    pub struct Config {
        pub producer: *const c_char,
        pub producer_version: *const c_char,
        pub git_commit: *const c_char,
        pub model_path: *const c_char,
        pub model_sha256: *const c_char,
        pub precision: *const c_char,
        pub fault: *const c_char,
        pub prompt_length: i64,
        pub tokens: *const i32,
        pub n_tokens: usize,
        pub hparams: *const Hparam,
        pub n_hparams: usize,
        pub dims: Dims,
        pub filter_names: *const c_char,
        pub filter_layers: *const c_char,
        pub filter_positions: *const c_char,
        pub commit_every: c_int,
        pub compress: c_int,
        pub fsync: c_int,
        pub layouts: *const Layout,
        pub n_layouts: usize,
        pub lockstep_source: *const c_char,
    }

    #[repr(C)]
    pub struct Layout {
        pub tap: *const c_char,
        pub layout: *const c_char,
    }

    extern "C" {
        pub fn tapdiff_trace_config_init(cfg: *mut Config);
        pub fn tapdiff_trace_open(path: *const c_char, cfg: *const Config, out: *mut *mut Trace) -> c_int;
        pub fn tapdiff_trace_enabled_range(trace: *const Trace, name: *const c_char, layer: c_int, first: i64,
                                           n: i64) -> c_int;
        pub fn tapdiff_trace_record(trace: *mut Trace, name: *const c_char, layer: c_int, first: i64, n_rows: i64,
                                    row_shape: *const i64, row_rank: c_int, rows: *const f32) -> c_int;
        pub fn tapdiff_trace_append_tokens(trace: *mut Trace, tokens: *const i32, n: usize) -> c_int;
        pub fn tapdiff_trace_end_step(trace: *mut Trace) -> c_int;
        pub fn tapdiff_trace_close(trace: *mut Trace) -> c_int;
        pub fn tapdiff_trace_abandon(trace: *mut Trace);
        pub fn tapdiff_last_error() -> *const c_char;
        pub fn tapdiff_status_name(status: c_int) -> *const c_char;
    }
}

/// A failed call: the C ABI's status name (`tapdiff_status_name`) and its message (which names the file, the tap and
/// what was expected), or an argument the C ABI could not take (a name holding a NUL byte).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub status: String,
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {}

fn c_text(text: *const c_char) -> String {
    if text.is_null() {
        return String::new();
    }
    // SAFETY: the C ABI returns NUL-terminated strings that live until the next call.
    unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
}

fn check(status: c_int) -> Result<(), Error> {
    if status == 0 {
        return Ok(());
    }
    // SAFETY: plain calls returning static or thread-local strings.
    Err(Error { status: c_text(unsafe { ffi::tapdiff_status_name(status) }), message: c_text(unsafe { ffi::tapdiff_last_error() }) })
}

/// An argument refused before it reaches the C ABI, with the ABI's name for the status.
fn argument_error(message: String) -> Error {
    // SAFETY: a plain call returning a static string.
    Error { status: c_text(unsafe { ffi::tapdiff_status_name(1) }), message }
}

fn c_string(what: &str, text: &str) -> Result<CString, Error> {
    CString::new(text).map_err(|_| argument_error(format!("{what}: \"{}\" holds a NUL byte", text.escape_debug())))
}

/// A hyperparameter recorded in the trace's metadata.
#[derive(Debug, Clone, PartialEq)]
pub enum Hparam {
    Int(i64),
    Float(f64),
    Text(String),
}

/// Model dimensions for the catalogue's shape checks; zeros are "not declared".
pub type Dims = ffi::Dims;

/// What a trace records about its run (the fields of `tapdiff_trace_config`).
#[derive(Debug, Clone, Default)]
pub struct Config {
    pub producer: String,
    pub producer_version: String,
    pub model_path: String,
    pub model_sha256: String,
    pub precision: String,
    pub prompt_length: i64,
    pub tokens: Vec<i32>,
    pub hparams: Vec<(String, Hparam)>,
    pub dims: Dims,
    pub filter_names: Option<String>,
    /// Taps stored in the engine's own layout: (tap, layout), e.g. ("attn_q", "axes=head_dim,n_head").
    pub layouts: Vec<(String, String)>,
}

impl Config {
    /// An external producer's run of `prompt_length` prompt tokens.
    pub fn external(version: &str, prompt_length: i64) -> Config {
        Config {
            producer: "external".into(),
            producer_version: version.into(),
            precision: "f32".into(),
            prompt_length,
            ..Config::default()
        }
    }
}

/// An open trace. `close()` commits it and marks it complete; dropping it without closing
/// abandons it (committed steps stay readable, the trace says it is incomplete).
pub struct TraceWriter {
    handle: *mut ffi::Trace,
}

impl TraceWriter {
    pub fn create(path: &str, config: &Config) -> Result<TraceWriter, Error> {
        let path = c_string("path", path)?;
        let texts = [
            c_string("producer", &config.producer)?,
            c_string("producer_version", &config.producer_version)?,
            c_string("model_path", &config.model_path)?,
            c_string("model_sha256", &config.model_sha256)?,
            c_string("precision", &config.precision)?,
        ];
        let filter = config.filter_names.as_deref().map(|f| c_string("filter_names", f)).transpose()?;
        let mut keys = Vec::new();
        let mut values = Vec::new();
        for (key, value) in &config.hparams {
            keys.push(c_string("hparam", key)?);
            values.push(match value {
                Hparam::Text(text) => Some(c_string("hparam value", text)?),
                _ => None,
            });
        }
        let hparams: Vec<ffi::Hparam> = config
            .hparams
            .iter()
            .zip(keys.iter().zip(values.iter()))
            .map(|((_, value), (key, text))| ffi::Hparam {
                key: key.as_ptr(),
                kind: match value {
                    Hparam::Int(_) => 0,
                    Hparam::Float(_) => 1,
                    Hparam::Text(_) => 2,
                },
                int_value: if let Hparam::Int(v) = value { *v } else { 0 },
                float_value: if let Hparam::Float(v) = value { *v } else { 0.0 },
                string_value: text.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            })
            .collect();
        let mut layout_texts = Vec::new();
        for (tap, layout) in &config.layouts {
            layout_texts.push((c_string("layout tap", tap)?, c_string("layout", layout)?));
        }
        let layouts: Vec<ffi::Layout> =
            layout_texts.iter().map(|(tap, layout)| ffi::Layout { tap: tap.as_ptr(), layout: layout.as_ptr() }).collect();
        let mut cfg = std::mem::MaybeUninit::<ffi::Config>::uninit();
        // SAFETY: config_init writes every field; the pointers set below outlive the open call.
        let mut cfg = unsafe {
            ffi::tapdiff_trace_config_init(cfg.as_mut_ptr());
            cfg.assume_init()
        };
        cfg.producer = texts[0].as_ptr();
        cfg.producer_version = texts[1].as_ptr();
        cfg.model_path = texts[2].as_ptr();
        cfg.model_sha256 = texts[3].as_ptr();
        cfg.precision = texts[4].as_ptr();
        cfg.prompt_length = config.prompt_length;
        cfg.tokens = config.tokens.as_ptr();
        cfg.n_tokens = config.tokens.len();
        cfg.hparams = hparams.as_ptr();
        cfg.n_hparams = hparams.len();
        cfg.dims = config.dims;
        cfg.filter_names = filter.as_ref().map_or(std::ptr::null(), |f| f.as_ptr());
        cfg.layouts = layouts.as_ptr();
        cfg.n_layouts = layouts.len();
        let mut handle = std::ptr::null_mut();
        // SAFETY: cfg and path are valid for the call; the handle is owned by the result.
        check(unsafe { ffi::tapdiff_trace_open(path.as_ptr(), &cfg, &mut handle) })?;
        Ok(TraceWriter { handle })
    }

    /// Whether any of positions first..first+n of the tap is recorded (ask before computing it).
    pub fn enabled(&self, name: &str, layer: i32, first: i64, n: i64) -> bool {
        match CString::new(name) {
            // SAFETY: a valid handle and a NUL-terminated name.
            Ok(name) => unsafe { ffi::tapdiff_trace_enabled_range(self.handle, name.as_ptr(), layer, first, n) != 0 },
            Err(_) => false,
        }
    }

    /// Records `n_rows` rows of `row_shape` for positions first.. (layer -1 for global taps).
    pub fn record(&mut self, name: &str, layer: i32, first: i64, n_rows: i64, row_shape: &[i64], rows: &[f32])
                  -> Result<(), Error> {
        let row_size: i64 = row_shape.iter().product();
        if row_shape.is_empty() || rows.len() as i64 != n_rows * row_size {
            return Err(argument_error(format!("record {name}: {} values for {n_rows} rows of shape {row_shape:?}",
                                              rows.len())));
        }
        let name = c_string("tap name", name)?;
        // SAFETY: rows holds n_rows * row_size floats, as the C ABI reads.
        check(unsafe {
            ffi::tapdiff_trace_record(self.handle, name.as_ptr(), layer, first, n_rows, row_shape.as_ptr(),
                                      row_shape.len() as c_int, rows.as_ptr())
        })
    }

    pub fn append_tokens(&mut self, tokens: &[i32]) -> Result<(), Error> {
        // SAFETY: a valid handle and slice.
        check(unsafe { ffi::tapdiff_trace_append_tokens(self.handle, tokens.as_ptr(), tokens.len()) })
    }

    /// Ends a step (a prefill batch or one decode position): the rows so far become durable.
    pub fn end_step(&mut self) -> Result<(), Error> {
        // SAFETY: a valid handle.
        check(unsafe { ffi::tapdiff_trace_end_step(self.handle) })
    }

    /// Commits, marks the trace complete and frees the handle (also when it fails).
    pub fn close(mut self) -> Result<(), Error> {
        let handle = std::mem::replace(&mut self.handle, std::ptr::null_mut());
        // SAFETY: the handle is valid and not used again.
        check(unsafe { ffi::tapdiff_trace_close(handle) })
    }
}

impl Drop for TraceWriter {
    fn drop(&mut self) {
        if !self.handle.is_null() {
            // SAFETY: a handle close() did not take: abandoned, freed once.
            unsafe { ffi::tapdiff_trace_abandon(self.handle) };
        }
    }
}
