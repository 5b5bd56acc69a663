//! Compiles the opt-in real-server provider test only when a server is named.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(real_llm)");
    println!("cargo::rerun-if-env-changed=STEWARD_TEST_OPENAI_URL");
    if std::env::var_os("STEWARD_TEST_OPENAI_URL").is_some() {
        println!("cargo::rustc-cfg=real_llm");
    }
}
