//! Build-script helper for kernel families.
//!
//! A *kernel family* is one CUDA C file, `kernels/<family>.cu`. A crate that owns a family calls
//! [`compile_family`] from its `build.rs`; that does three things:
//!
//! 1. **For the GPU**: writes `$OUT_DIR/<family>.cu`, the source with every quoted `#include`
//!    pasted in (with `#line` directives, so NVRTC's log still points at the real file and line).
//!    The crate embeds this self-contained text with `include_str!` and NVRTC compiles it at run
//!    time; nothing outside the binary is needed but the CUDA headers for `<cuda_bf16.h>`.
//! 2. **For the emulator**: compiles the *same* `.cu` file with the host C++ compiler against
//!    `kernels/emu/cuda_emu.h`, with FMA contraction off, plus one trampoline per
//!    `extern "C" __global__` kernel that unpacks a `cuLaunchKernel`-style parameter array.
//! 3. **For Rust**: writes `$OUT_DIR/<family>.rs`, an expression of type
//!    `moe_kernels::KernelSource` that names the embedded source and the trampolines; the crate
//!    includes it with `moe_kernels::kernel_family!("<family>")`.
//!
//! The emulator's scheduler (`kernels/emu/emu_runtime.cpp`) is compiled once, by the runtime
//! crate, through [`compile_emu_runtime`].

use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Finds the repository's `kernels/` folder by walking up from the calling crate's manifest
/// directory until `kernels/emu/cuda_emu.h` exists.
pub fn kernels_dir() -> PathBuf {
    let start =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("run from a build script"));
    let mut dir: &Path = &start;
    loop {
        for candidate in [dir.join("kernels"), dir.to_path_buf()] {
            if candidate.join("emu").join("cuda_emu.h").is_file() {
                return candidate;
            }
        }
        dir = match dir.parent() {
            Some(p) => p,
            None => panic!("no kernels/emu/cuda_emu.h above {}", start.display()),
        };
    }
}

/// Pastes every `#include "file"` (quoted form) found in `path` or in the folders of
/// `include_dirs`, recursively; a file with `#pragma once` (every header) at most once.
/// Angle-bracket includes (`<cuda_bf16.h>`) are left for NVRTC. Returns the text and every file
/// that was read, for `rerun-if-changed`.
pub fn inline_includes(
    path: &Path,
    include_dirs: &[PathBuf],
) -> io::Result<(String, Vec<PathBuf>)> {
    let mut out = String::new();
    let mut seen = HashSet::new();
    let mut read = Vec::new();
    inline_into(path, include_dirs, &mut out, &mut seen, &mut read)?;
    Ok((out, read))
}

fn inline_into(
    path: &Path,
    include_dirs: &[PathBuf],
    out: &mut String,
    seen: &mut HashSet<PathBuf>,
    read: &mut Vec<PathBuf>,
) -> io::Result<()> {
    let canonical = fs::canonicalize(path)?;
    let text = fs::read_to_string(&canonical)?;
    // A header with `#pragma once` is pasted once; a file without it (an X-macro list, included
    // once per expansion) every time, as the preprocessor would.
    let once = text
        .lines()
        .any(|l| l.trim_start().starts_with("#pragma once"));
    if once && !seen.insert(canonical.clone()) {
        return Ok(());
    }
    if !read.contains(&canonical) {
        read.push(canonical.clone());
    }
    let name = canonical.file_name().unwrap().to_string_lossy().to_string();
    writeln!(out, "#line 1 \"{name}\"").unwrap();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#pragma once") {
            out.push('\n');
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("#include") {
            let rest = rest.trim();
            if let Some(inner) = rest.strip_prefix('"').and_then(|r| r.split('"').next()) {
                let here = canonical.parent().unwrap().join(inner);
                let found = std::iter::once(here)
                    .chain(include_dirs.iter().map(|d| d.join(inner)))
                    .find(|p| p.is_file())
                    .ok_or_else(|| {
                        io::Error::new(
                            io::ErrorKind::NotFound,
                            format!("{name}:{}: cannot find include \"{inner}\"", i + 1),
                        )
                    })?;
                inline_into(&found, include_dirs, out, seen, read)?;
                writeln!(out, "#line {} \"{name}\"", i + 2).unwrap();
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    Ok(())
}

/// A function-like macro: its parameters and its body (continuation lines kept as lines).
struct Macro {
    params: Vec<String>,
    body: String,
}

/// `source` with every invocation of an *entry-stamping* macro expanded: a function-like macro
/// whose body holds `__global__`, or invokes such a macro (an X-macro list's line macro, say,
/// `#define CH04_TILE(NAME, ...) CH04_ENTRIES(NAME, ...)` then `#include "ch04/configs.def"`).
/// So a family may stamp its entry points from one list of configurations and the build still
/// finds every kernel's name and signature ([`kernel_names`], [`kernel_params`]). Handles what
/// such macros use: parameters, `##` pasting, nested invocations, `#undef`; other macros and
/// text are left as they are (NVRTC and the host compiler expand them for real).
pub fn expand_entry_macros(source: &str) -> String {
    let mut macros: std::collections::HashMap<String, Macro> = Default::default();
    let mut out = String::with_capacity(source.len());
    let mut lines = source.lines();
    while let Some(first) = lines.next() {
        if first.trim_start().starts_with('#') {
            // A directive: join its continuation lines, keeping them as lines of the body.
            let mut text = first.to_string();
            while text.ends_with('\\') {
                text.pop();
                text.push('\n');
                match lines.next() {
                    Some(l) => text.push_str(l),
                    None => break,
                }
            }
            let def = text.trim_start()[1..].trim_start();
            // A definition or #undef leaves an empty line: its body is not an entry point.
            if let Some(rest) = def.strip_prefix("define") {
                if let Some((name, m)) = parse_function_macro(rest) {
                    macros.insert(name, m);
                }
            } else if let Some(rest) = def.strip_prefix("undef") {
                macros.remove(rest.trim());
            } else {
                out.push_str(&text);
            }
            out.push('\n');
            continue;
        }
        out.push_str(&expand_text(first, &macros, 0));
        out.push('\n');
    }
    out
}

fn parse_function_macro(rest: &str) -> Option<(String, Macro)> {
    let rest = rest.trim_start();
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let after = rest[name.len()..].strip_prefix('(')?; // no space: function-like
    let close = after.find(')')?;
    let params = after[..close]
        .split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    let body = after[close + 1..].trim().to_string();
    Some((name, Macro { params, body }))
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether macro `name` stamps entry points (its body, or a macro it invokes, holds `__global__`).
fn stamps(name: &str, macros: &std::collections::HashMap<String, Macro>, depth: usize) -> bool {
    let Some(m) = macros.get(name) else {
        return false;
    };
    if m.body.contains("__global__") {
        return true;
    }
    if depth >= 8 {
        return false;
    }
    // A macro it invokes, by name or by a name pasted together (`ENTRIES_##VERSION(...)`: any
    // macro whose name starts with the pasted prefix).
    let pieces: Vec<&str> = m.body.split("##").collect();
    let pasted: Vec<&str> = pieces[..pieces.len() - 1]
        .iter()
        .filter_map(|left| left.trim_end().rsplit(|c: char| !is_ident(c)).next())
        .collect();
    m.body
        .split(|c: char| !is_ident(c))
        .any(|w| w != name && macros.contains_key(w) && stamps(w, macros, depth + 1))
        || macros.keys().any(|k| {
            k != name
                && pasted.iter().any(|p| p.len() >= 3 && k.starts_with(p))
                && stamps(k, macros, depth + 1)
        })
}

/// One pass over `text`: each stamping macro's invocation replaced by its body (arguments
/// substituted, `##` pasted), itself expanded again.
fn expand_text(
    text: &str,
    macros: &std::collections::HashMap<String, Macro>,
    depth: usize,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let bytes = text.as_bytes();
    while i < text.len() {
        let c = text[i..].chars().next().unwrap();
        if !is_ident(c) || (i > 0 && is_ident(bytes[i - 1] as char)) {
            out.push(c);
            i += c.len_utf8();
            continue;
        }
        let end = i + text[i..]
            .find(|c: char| !is_ident(c))
            .unwrap_or(text.len() - i);
        let word = &text[i..end];
        let open = end + text[end..].len() - text[end..].trim_start().len();
        if depth < 8 && text[open..].starts_with('(') && stamps(word, macros, 0) {
            if let Some((args, close)) = split_args(text, open) {
                let m = &macros[word];
                out.push_str(&expand_text(&substitute(m, &args), macros, depth + 1));
                i = close + 1;
                continue;
            }
        }
        out.push_str(word);
        i = end;
    }
    out
}

/// The arguments of the invocation whose `(` is at `open`, split at top-level commas, and the
/// index of its `)`.
fn split_args(text: &str, open: usize) -> Option<(Vec<String>, usize)> {
    let mut depth = 0;
    let mut args = vec![String::new()];
    for (j, c) in text[open..].char_indices() {
        match c {
            '(' => {
                depth += 1;
                if depth == 1 {
                    continue;
                }
            }
            ')' => {
                depth -= 1;
                if depth == 0 {
                    let args = args.into_iter().map(|a| a.trim().to_string()).collect();
                    return Some((args, open + j));
                }
            }
            ',' if depth == 1 => {
                args.push(String::new());
                continue;
            }
            _ => {}
        }
        args.last_mut().unwrap().push(c);
    }
    None
}

fn substitute(m: &Macro, args: &[String]) -> String {
    let mut out = String::with_capacity(m.body.len());
    let body = &m.body;
    let mut i = 0;
    while i < body.len() {
        let c = body[i..].chars().next().unwrap();
        if c == '"' {
            // A string literal (`extern "C"`) as it is: no parameter inside it.
            let end = body[i + 1..].find('"').map_or(body.len(), |j| i + j + 2);
            out.push_str(&body[i..end]);
            i = end;
        } else if is_ident(c) {
            let end = i + body[i..]
                .find(|c: char| !is_ident(c))
                .unwrap_or(body.len() - i);
            let word = &body[i..end];
            match m.params.iter().position(|p| p == word) {
                Some(k) => out.push_str(args.get(k).map(String::as_str).unwrap_or("")),
                None => out.push_str(word),
            }
            i = end;
        } else {
            out.push(c);
            i += c.len_utf8();
        }
    }
    // Token pasting: `a ## b` is `ab`.
    while let Some(at) = out.find("##") {
        let left = out[..at].trim_end().len();
        let right = at + 2 + (out[at + 2..].len() - out[at + 2..].trim_start().len());
        out.replace_range(left..right, "");
    }
    out
}

/// The names of the `extern "C" __global__ void NAME(` entry points of a source, in order
/// (entry points stamped by macros included: [`expand_entry_macros`]).
/// `__launch_bounds__(...)` and `__cluster_dims__(...)` between `void` and the name are skipped.
pub fn kernel_names(source: &str) -> Vec<String> {
    let expanded = expand_entry_macros(source);
    let mut names = Vec::new();
    let mut rest = expanded.as_str();
    while let Some(pos) = rest.find("__global__") {
        let before = &rest[..pos];
        let line_start = before.rfind('\n').map(|p| p + 1).unwrap_or(0);
        let is_extern_c = before[line_start..].contains("extern \"C\"");
        let is_comment = before[line_start..].trim_start().starts_with("//");
        let mut after = rest[pos + "__global__".len()..].trim_start();
        rest = &rest[pos + "__global__".len()..];
        if !is_extern_c || is_comment {
            continue;
        }
        after = match after.strip_prefix("void") {
            Some(a) => a.trim_start(),
            None => continue,
        };
        // Attributes with arguments, in any order: skip their balanced parentheses.
        while let Some(a) = ["__launch_bounds__", "__cluster_dims__"]
            .iter()
            .find_map(|attr| after.strip_prefix(attr))
        {
            let mut depth = 0usize;
            let mut end = a.len();
            for (i, c) in a.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            end = i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            after = a[end..].trim_start();
        }
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            names.push(name);
        }
    }
    names
}

/// The parameter kinds of kernel `name` in `source`, as names of `moe_kernels::ParamKind`
/// variants: a pointer is `Ptr`; `int` is `I32`, `unsigned` `U32`, `long long` `I64`,
/// `unsigned long long` / `size_t` `U64`, `float` `F32`. The runtime checks every launch's
/// arguments against them, so a wrong count or type is an error instead of garbage.
pub fn kernel_params(source: &str, name: &str) -> Result<Vec<&'static str>, String> {
    match kernel_params_in(source, name) {
        Err(e) if e.ends_with("signature not found") => {
            kernel_params_in(&expand_entry_macros(source), name)
        }
        r => r,
    }
}

fn kernel_params_in(source: &str, name: &str) -> Result<Vec<&'static str>, String> {
    let at = source
        .match_indices(name)
        .map(|(i, _)| i)
        .find(|&i| {
            let after = source[i + name.len()..].trim_start();
            let before_ok = source[..i]
                .chars()
                .last()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            before_ok
                && after.starts_with('(')
                && source[..i]
                    .rfind("__global__")
                    .is_some_and(|g| !source[g..i].contains(';') && !source[g..i].contains('{'))
        })
        .ok_or_else(|| format!("kernel {name}: signature not found"))?;
    let open = at + name.len() + source[at + name.len()..].find('(').unwrap();
    let close = open
        + source[open..]
            .find(')')
            .ok_or_else(|| format!("kernel {name}: no closing parenthesis"))?;
    let list = source[open + 1..close].trim();
    if list.is_empty() || list == "void" {
        return Ok(Vec::new());
    }
    list.split(',')
        .map(|param| {
            let param = param.split_whitespace().collect::<Vec<_>>().join(" ");
            if param.contains('*') {
                return Ok("Ptr");
            }
            let words: Vec<&str> = param
                .split(' ')
                .filter(|w| !matches!(*w, "const" | "volatile" | "__restrict__"))
                .collect();
            // The last word is the parameter's name.
            let ty = words[..words.len().saturating_sub(1)].join(" ");
            match ty.as_str() {
                "int" | "int32_t" | "signed" | "signed int" => Ok("I32"),
                "unsigned" | "unsigned int" | "uint32_t" => Ok("U32"),
                "long long" | "long long int" | "int64_t" => Ok("I64"),
                "unsigned long long" | "unsigned long long int" | "uint64_t" | "size_t" => Ok("U64"),
                "float" => Ok("F32"),
                _ => Err(format!("kernel {name}: parameter `{param}` has a type the launcher does not pass ({ty})")),
            }
        })
        .collect()
}

/// How the generated Rust refers to the runtime crate: `::moe_kernels` from a chapter,
/// `crate` from inside the runtime crate.
#[derive(Clone, Copy, Debug)]
pub enum CratePath {
    External,
    Internal,
}

impl CratePath {
    fn as_str(self) -> &'static str {
        match self {
            CratePath::External => "::moe_kernels",
            CratePath::Internal => "crate",
        }
    }
}

/// Whether the emulator's kernels are built for this CPU's FMA and AVX2 instructions: `fmaf`
/// then compiles to one instruction (the same correctly rounded result as the library call) and
/// the compiler may use vector registers. `MOE_EMU_ARCH=generic` turns it off, `native` forces
/// it; by default it is on when the build machine's CPU has both and builds for itself. The
/// runtime refuses, with a message, to run such kernels on a CPU without them.
pub fn emu_kernels_use_fma() -> bool {
    println!("cargo:rerun-if-env-changed=MOE_EMU_ARCH");
    let target = std::env::var("TARGET").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    match std::env::var("MOE_EMU_ARCH").ok().as_deref().map(str::trim) {
        Some("generic") => return false,
        Some("native") => return target.starts_with("x86_64"),
        _ => {}
    }
    #[cfg(target_arch = "x86_64")]
    {
        target == host
            && target.starts_with("x86_64")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (target, host);
        false
    }
}

/// Parses a list of macro switches, space-separated `NAME` or `NAME=VALUE` (a bare `NAME` is
/// `NAME=1`), into (name, value) pairs; `Err` says what is wrong with the first bad one. The one
/// parser of both `MOE_NVRTC_DEFINES` (the CUDA backend, at run time) and
/// `MOE_EMU_DEFINES_<FAMILY>` (the emulator's build, below).
pub fn parse_defines(value: &str) -> Result<Vec<(String, String)>, String> {
    let word = |w: &str| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    value
        .split_whitespace()
        .map(|d| {
            let (name, val) = d.split_once('=').unwrap_or((d, "1"));
            if !word(name) || name.starts_with(|c: char| c.is_ascii_digit()) {
                return Err(format!("{name:?} is not a macro name"));
            }
            if !word(val) {
                return Err(format!("the value of {name} ({val:?}) is not a plain word"));
            }
            Ok((name.to_string(), val.to_string()))
        })
        .collect()
}

/// The switches of one family's emulator build: `MOE_EMU_DEFINES_<FAMILY>` (the family's name in
/// capitals, e.g. `MOE_EMU_DEFINES_CH08_ROUTING_STAGE`), read when the crate is built
/// ([`parse_defines`]). The emulator's counterpart of the CUDA backend's `MOE_NVRTC_DEFINES`
/// (read at run time): CI builds a family with its speed switches that are still off by default
/// switched on, and runs its tests, so that no switch goes untested. One variable per family, so
/// that setting it rebuilds that family alone.
fn emu_defines(family: &str) -> Vec<(String, String)> {
    let var = format!("MOE_EMU_DEFINES_{}", family.to_ascii_uppercase());
    println!("cargo:rerun-if-env-changed={var}");
    let Ok(value) = std::env::var(&var) else {
        return Vec::new();
    };
    let defines = parse_defines(&value).unwrap_or_else(|why| {
        panic!("{var}={value:?}: {why} (expected space-separated NAME or NAME=VALUE)")
    });
    if !defines.is_empty() {
        println!("cargo:warning=the emulator's {family} built with {var}={value:?}");
    }
    defines
}

fn emu_build(kernels: &Path) -> cc::Build {
    let mut b = cc::Build::new();
    b.cpp(true)
        // gnu++17: GNU comma elision in variadic macros (`f(__LINE__, ##__VA_ARGS__)`), which the
        // emulator's intrinsic macros use for CUDA's default arguments.
        .std("gnu++17")
        // The emulator runs the kernels' arithmetic; it must be fast even in debug builds.
        .opt_level(2)
        .debug(false)
        // Bit-exactness with the GPU: no fused multiply-add unless the kernel writes fmaf.
        .flag("-ffp-contract=off")
        .flag_if_supported("-fno-fast-math")
        .flag_if_supported("-fno-strict-aliasing")
        // Frame pointers, and no tail calls: the runtime walks the frames to tell apart two calls
        // of a helper function that holds a __syncthreads, and a tail call would remove the
        // frame of the function that holds it on one path but not on another.
        .flag("-fno-omit-frame-pointer")
        .flag("-fno-optimize-sibling-calls")
        // `__shared__` is a thread_local: the initial-exec model makes each access one load
        // from the thread pointer instead of a call (the code is linked into executables,
        // never loaded by dlopen).
        .flag_if_supported("-ftls-model=initial-exec")
        // CUDA code compares unsigned threadIdx with int everywhere; -Wall would drown the
        // build log. NVRTC still reports real problems when the same file is built for the GPU.
        .warnings(false)
        .define("MOE_EMU", "1")
        .include(kernels.join("emu"))
        .include(kernels);
    if emu_kernels_use_fma() {
        b.define("MOE_EMU_KERNELS_FMA", "1");
    }
    b
}

/// Compiles the emulator's runtime (scheduler, fibers, barriers, memory, signals, tensor-core
/// fragments). Called by the runtime crate only, so the binary holds one copy. The runtime
/// itself is built for the generic CPU (it checks the CPU before running kernels that are not).
pub fn compile_emu_runtime() {
    let kernels = kernels_dir();
    let emu = kernels.join("emu");
    for entry in fs::read_dir(&emu).expect("kernels/emu") {
        let p = entry.unwrap().path();
        if p.is_file() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    let mut b = emu_build(&kernels);
    for f in [
        "emu_runtime.cpp",
        "emu_memory.cpp",
        "emu_signals.cpp",
        "emu_tensor.cpp",
    ] {
        b.file(emu.join(f));
    }
    b.compile("moe_emu_runtime");
}

/// The lines of an X-macro list (`kernels/ch04/configs.def`) as a build script reads it:
/// [`parse_macro_list`] of the file, and `rerun-if-changed` for it. So a crate's build script can
/// turn the list its kernels are stamped from into Rust data.
pub fn read_macro_list(path: &Path) -> Vec<(String, Vec<String>)> {
    println!("cargo:rerun-if-changed={}", path.display());
    let text =
        fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    parse_macro_list(&text)
}

/// Every `MACRO(arg, arg, ...)` line of an X-macro list, comments left out, as (MACRO, [arg,
/// ...]) in order (for a tool that reads the list outside a build script, the figures say).
pub fn parse_macro_list(text: &str) -> Vec<(String, Vec<String>)> {
    text.lines()
        .filter_map(|line| {
            let line = line.split("//").next().unwrap().trim();
            let (name, rest) = line.split_once('(')?;
            let args = rest.trim_end().strip_suffix(')')?;
            let name = name.trim();
            if name.is_empty() || !name.chars().all(is_ident) {
                return None;
            }
            Some((
                name.to_string(),
                args.split(',').map(|a| a.trim().to_string()).collect(),
            ))
        })
        .collect()
}

/// `#define NAME 123` lines of a kernel file (its own text, not its includes) whose NAME is
/// upper case: the launch geometry the host needs (rows per block, tile sizes), named once in
/// the .cu and handed to Rust as constants. Returns (name, value, the line's trailing comment).
pub fn kernel_constants(source: &str) -> Vec<(String, i64, String)> {
    let mut out: Vec<(String, i64, String)> = Vec::new();
    for line in source.lines() {
        let Some(rest) = line.trim_start().strip_prefix("#define ") else {
            continue;
        };
        let mut parts = rest.splitn(2, char::is_whitespace);
        let name = parts.next().unwrap_or("");
        let tail = parts.next().unwrap_or("").trim();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            || name.contains('(')
        {
            continue;
        }
        let (value, comment) = match tail.split_once("//") {
            Some((v, c)) => (v.trim(), c.trim()),
            None => (tail, ""),
        };
        // A header pasted twice (an X-macro list) defines its names twice: keep the first.
        if let Ok(v) = value.parse::<i64>() {
            if !out.iter().any(|(n, _, _)| n == name) {
                out.push((name.to_string(), v, comment.to_string()));
            }
        }
    }
    out
}

/// Whether `path` is a chapter's header, `kernels/chNN/…`: a folder of the kernels directory whose
/// name starts with `ch` and two digits.
fn is_chapter_header(kernels: &Path, path: &Path) -> bool {
    let Ok(kernels) = fs::canonicalize(kernels) else {
        return false;
    };
    let Some(dir) = path.parent() else {
        return false;
    };
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let b = name.as_bytes();
    dir.parent() == Some(kernels.as_path())
        && b.len() >= 4
        && name.starts_with("ch")
        && b[2].is_ascii_digit()
        && b[3].is_ascii_digit()
}

/// Compiles `kernels/<family>.cu` for the emulator and writes the embedded GPU source and the
/// Rust `KernelSource` expression into `$OUT_DIR` (see the crate docs).
pub fn compile_family(family: &str, crate_path: CratePath) {
    let cu = kernels_dir().join(format!("{family}.cu"));
    compile_family_from(family, &cu, crate_path);
}

/// [`compile_family`] from another file than `kernels/<family>.cu` (an exercise's answer, say):
/// the family keeps its name.
pub fn compile_family_from(family: &str, cu: &Path, crate_path: CratePath) {
    let kernels = kernels_dir();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let cu = cu.to_path_buf();
    let (inlined, read) = inline_includes(&cu, std::slice::from_ref(&kernels))
        .unwrap_or_else(|e| panic!("reading {}: {e}", cu.display()));
    for p in &read {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    for f in [
        "cuda_emu.h",
        "emu_trampoline.h",
        "mma.h",
        "tc_model.h",
        "hopper.h",
    ] {
        println!(
            "cargo:rerun-if-changed={}",
            kernels.join("emu").join(f).display()
        );
    }
    let gpu_src = out.join(format!("{family}.cu"));
    fs::write(&gpu_src, &inlined).unwrap();

    let names = kernel_names(&inlined);
    assert!(
        !names.is_empty(),
        "{}: no extern \"C\" __global__ kernels found",
        cu.display()
    );

    let mut wrapper = String::new();
    writeln!(
        wrapper,
        "// Generated by moe-kernels-build: the emulator build of {family}.cu"
    )
    .unwrap();
    writeln!(wrapper, "#include \"cuda_emu.h\"").unwrap();
    writeln!(wrapper, "#include \"{}\"", cu.display()).unwrap();
    writeln!(wrapper, "#include \"emu_trampoline.h\"").unwrap();
    for n in &names {
        writeln!(
            wrapper,
            "extern \"C\" void emu_tramp__{family}__{n}(void** p) {{ emu::call_kernel({n}, p); }}"
        )
        .unwrap();
    }
    let wrapper_path = out.join(format!("emu_{family}.cpp"));
    fs::write(&wrapper_path, wrapper).unwrap();
    let mut build = emu_build(&kernels);
    for (name, value) in emu_defines(family) {
        build.define(&name, value.as_str());
    }
    // Kernels write `#pragma unroll`, which GCC does not read; -funroll-loops unrolls the small
    // constant loops of register tiles instead (the tiled GEMM of chapter 1 runs a third faster).
    build.flag("-funroll-loops");
    if emu_kernels_use_fma() {
        build.flag("-mfma").flag("-mavx2");
    }
    build
        .file(&wrapper_path)
        .compile(&format!("moe_emu_{family}"));

    // The family's launch geometry, for `moe_kernels::kernel_constants!`: the numeric defines of
    // its own file and of the chapter headers it includes (`kernels/chNN/*.cuh`), so that a
    // constant moved into a chapter header keeps its Rust name, and a later chapter that includes
    // the header sees the same value. Shared headers (common.cuh, mma.cuh, …) are left out.
    let mut own = fs::read_to_string(&cu).unwrap_or_default();
    for p in read.iter().skip(1) {
        if is_chapter_header(&kernels, p) {
            own.push('\n');
            own.push_str(&fs::read_to_string(p).unwrap_or_default());
        }
    }
    let mut consts = String::new();
    writeln!(
        consts,
        "// Generated by moe-kernels-build from kernels/{family}.cu"
    )
    .unwrap();
    for (name, value, comment) in kernel_constants(&own) {
        if !comment.is_empty() {
            writeln!(consts, "/// {comment}").unwrap();
        }
        writeln!(
            consts,
            "/// (`#define {name} {value}` in kernels/{family}.cu)"
        )
        .unwrap();
        writeln!(consts, "pub const {name}: usize = {value};").unwrap();
    }
    fs::write(out.join(format!("{family}_consts.rs")), consts).unwrap();

    let krate = crate_path.as_str();
    let mut rs = String::new();
    writeln!(
        rs,
        "// Generated by moe-kernels-build for kernels/{family}.cu"
    )
    .unwrap();
    writeln!(rs, "{{").unwrap();
    writeln!(rs, "    extern \"C\" {{").unwrap();
    for n in &names {
        writeln!(
            rs,
            "        fn emu_tramp__{family}__{n}(params: *mut *mut ::core::ffi::c_void);"
        )
        .unwrap();
    }
    writeln!(rs, "    }}").unwrap();
    writeln!(rs, "    {krate}::KernelSource {{").unwrap();
    writeln!(rs, "        family: {family:?},").unwrap();
    writeln!(
        rs,
        "        cuda_source: include_str!({:?}),",
        gpu_src.display().to_string()
    )
    .unwrap();
    writeln!(rs, "        emu: &[").unwrap();
    for n in &names {
        let params = kernel_params(&inlined, n).unwrap_or_else(|e| panic!("{}: {e}", cu.display()));
        let params: Vec<String> = params
            .iter()
            .map(|p| format!("{krate}::ParamKind::{p}"))
            .collect();
        writeln!(
            rs,
            "            {krate}::EmuKernel {{ name: {n:?}, entry: emu_tramp__{family}__{n}, params: &[{}] }},",
            params.join(", ")
        )
        .unwrap();
    }
    writeln!(rs, "        ],").unwrap();
    writeln!(rs, "    }}").unwrap();
    writeln!(rs, "}}").unwrap();
    fs::write(out.join(format!("{family}.rs")), rs).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_kernel_names() {
        let src = r#"
// extern "C" __global__ void commented_out(int x) {}
extern "C" __global__ void plain(float* x) {}
extern "C" __global__ void __launch_bounds__(256, 2) bounded(const int* a) {}
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384) clustered(int* a) {}
__global__ void not_extern_c(int) {}
extern "C" __device__ int helper() { return 0; }
"#;
        assert_eq!(kernel_names(src), vec!["plain", "bounded", "clustered"]);
    }

    #[test]
    fn finds_kernels_stamped_from_a_list() {
        let src = r#"
#define ENTRIES(NAME, C) \
    extern "C" __global__ void __launch_bounds__(C) k1_##NAME(const float* x, int n) { f<C>(x, n); } \
    extern "C" __global__ void k2_ ## NAME(float* y, unsigned m) {}
#define CONFIG(NAME, WARPS) ENTRIES(NAME, 32 * WARPS)
#define BY_VERSION_7(NAME) extern "C" __global__ void __cluster_dims__(2, 1, 1) v7_##NAME(int* a) {}
#define VERSIONED(NAME, VERSION) BY_VERSION_ ## VERSION(NAME)
CONFIG(w4, 4)
CONFIG(w8, (2 * 4))
#undef CONFIG
CONFIG(gone, 1)
VERSIONED(g1, 7)
extern "C" __global__ void plain(int a) {}
"#;
        assert_eq!(
            kernel_names(src),
            vec!["k1_w4", "k2_w4", "k1_w8", "k2_w8", "v7_g1", "plain"]
        );
        assert_eq!(kernel_params(src, "k1_w8").unwrap(), vec!["Ptr", "I32"]);
        assert_eq!(kernel_params(src, "k2_w4").unwrap(), vec!["Ptr", "U32"]);
        assert_eq!(kernel_params(src, "plain").unwrap(), vec!["I32"]);
    }

    #[test]
    fn reads_an_x_macro_list() {
        let list = "// a comment\nTILE(w4, 1, 4)  // the default\n\n#define X(a) a\nHOPPER_TILE( g1 , 4,1 )\n";
        assert_eq!(
            parse_macro_list(list),
            vec![
                (
                    "TILE".to_string(),
                    vec!["w4".to_string(), "1".into(), "4".into()]
                ),
                (
                    "HOPPER_TILE".to_string(),
                    vec!["g1".to_string(), "4".into(), "1".into()]
                ),
            ]
        );
    }

    #[test]
    fn reads_launch_geometry_constants() {
        let src = "#define ROWS_PER_BLOCK 8  // rows of one block\n#define TILE 64\n#define lower 3\n#define F(x) x\n  #define NOT_A_NUMBER abc\n";
        assert_eq!(
            kernel_constants(src),
            vec![
                (
                    "ROWS_PER_BLOCK".to_string(),
                    8,
                    "rows of one block".to_string()
                ),
                ("TILE".to_string(), 64, String::new())
            ]
        );
    }

    #[test]
    fn classifies_kernel_parameters() {
        let src = r#"
extern "C" __global__ void __launch_bounds__(64) k(const float* __restrict__ x, int n, unsigned never,
                                                  unsigned long long n16, float scale, uint4* out) {}
extern "C" __global__ void empty() {}
extern "C" __global__ void odd(double d) {}
"#;
        assert_eq!(
            kernel_params(src, "k").unwrap(),
            vec!["Ptr", "I32", "U32", "U64", "F32", "Ptr"]
        );
        assert_eq!(kernel_params(src, "empty").unwrap(), Vec::<&str>::new());
        let err = kernel_params(src, "odd").unwrap_err();
        assert!(err.contains("double d"), "{err}");
    }

    #[test]
    fn inlines_quoted_includes_once_with_line_directives() {
        let dir = std::env::temp_dir().join(format!("moe-inline-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("a.cuh"), "#pragma once\nint a;\n").unwrap();
        fs::write(dir.join("list.def"), "X(one)\n").unwrap();
        fs::write(
            dir.join("b.cu"),
            "#include \"a.cuh\"\n#include \"a.cuh\"\n#include <cuda_bf16.h>\nint b;\n\
             #include \"list.def\"\n#include \"list.def\"\n",
        )
        .unwrap();
        let (text, read) = inline_includes(&dir.join("b.cu"), &[]).unwrap();
        assert_eq!(read.len(), 3);
        assert_eq!(text.matches("int a;").count(), 1);
        assert_eq!(text.matches("X(one)").count(), 2, "{text}");
        assert!(text.contains("#include <cuda_bf16.h>"));
        assert!(text.contains("#line 3 \"b.cu\""));
        let missing = dir.join("c.cu");
        fs::write(&missing, "#include \"nope.cuh\"\n").unwrap();
        let err = inline_includes(&missing, &[]).unwrap_err().to_string();
        assert!(
            err.contains("c.cu:1: cannot find include \"nope.cuh\""),
            "{err}"
        );
    }
}
