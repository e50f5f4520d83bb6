//! Chapter 1's main: `cargo run --example ch01` (add `-- --help` for the options).
//! The walk-through lives in `chapters/ch01-router/src/example.rs`, where the book quotes it.
fn main() -> std::process::ExitCode {
    ch01_router::example::main()
}
