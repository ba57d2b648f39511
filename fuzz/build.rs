//! Gives the fuzz binaries an rpath to libtorch, as trickbench's own build script does for its
//! binaries (link arguments do not pass from a library to the packages that use it).
fn main() {
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys reports where libtorch is");
    let lib = std::fs::canonicalize(&lib).unwrap_or_else(|_| lib.into());
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
}
