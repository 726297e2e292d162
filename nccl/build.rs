//! Programs linked with `-lnccl` record the SONAME, not the file name: NCCL's is
//! `libnccl.so.2`, so weft's library must carry the same one to stand in for it.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
    println!("cargo:rerun-if-changed=build.rs");
}
