// Links the tapdiff tracer: TAPDIFF_TRACER_LIB is the path of libtapdiff_tracer.a (a tapdiff
// build's build/tracer/libtapdiff_tracer.a), TAPDIFF_LINK_LIBS the libraries it needs (HDF5),
// as full paths or names, separated by ':'.
use std::env;
use std::path::Path;

fn link(library: &str) {
    let path = Path::new(library);
    if let (Some(dir), Some(file)) = (path.parent(), path.file_name().and_then(|f| f.to_str())) {
        if !dir.as_os_str().is_empty() {
            println!("cargo:rustc-link-search=native={}", dir.display());
            let stem = file.strip_prefix("lib").unwrap_or(file);
            let (name, kind) = if let Some(name) = stem.strip_suffix(".a") {
                (name, "static")
            } else {
                (stem.split(".so").next().unwrap_or(stem), "dylib")
            };
            println!("cargo:rustc-link-lib={}={}", kind, name);
            return;
        }
    }
    println!("cargo:rustc-link-lib=dylib={}", library);
}

fn main() {
    println!("cargo:rerun-if-env-changed=TAPDIFF_TRACER_LIB");
    println!("cargo:rerun-if-env-changed=TAPDIFF_LINK_LIBS");
    let tracer = env::var("TAPDIFF_TRACER_LIB").unwrap_or_else(|_| {
        panic!("TAPDIFF_TRACER_LIB: expected the path of libtapdiff_tracer.a (build/tracer/ of a tapdiff build)")
    });
    link(&tracer);
    for library in env::var("TAPDIFF_LINK_LIBS").unwrap_or_default().split(':').filter(|l| !l.is_empty()) {
        link(library);
    }
    println!("cargo:rustc-link-lib=dylib=stdc++");
}
