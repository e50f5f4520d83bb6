//! Reading insta snapshot files: a YAML header between two `---` lines, then the snapshot body.

/// The 1-based line number of the first body line: the line after the second `---`.
/// `None` when the text has no complete header.
pub fn body_start_line(text: &str) -> Option<usize> {
    let mut dashes = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_end() == "---")
        .map(|(i, _)| i);
    let _first = dashes.next()?;
    let second = dashes.next()?;
    Some(second + 2)
}

/// The snapshot's body: the text with the lines from the first `---` to the second `---`
/// (inclusive) removed.
pub fn strip_header(text: &str) -> Result<String, String> {
    let start = body_start_line(text)
        .ok_or_else(|| "not an insta snapshot: no `---` … `---` header".to_string())?;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let first = lines
        .iter()
        .position(|l| l.trim_end() == "---")
        .expect("a header was found above");
    // Anything above the header (there should be nothing) is kept, like the brief says.
    let mut body: String = lines[..first].concat();
    body.push_str(&lines[start - 1..].concat());
    Ok(body)
}

/// Compares an example's stdout with a snapshot body, ignoring trailing newlines (insta trims
/// them when it writes a snapshot, and so does its own comparison) and what stands between `⟨`
/// and `⟩`: a number measured on the machine that ran the example (an error against an
/// oracle, which differs between cuBLAS and the emulator's GEMM), checked by the tests against
/// a tolerance instead. Snapshots store such a number as `⟨…⟩` ([`mask_measured`]).
pub fn same_output(stdout: &str, body: &str) -> bool {
    normalize(stdout) == normalize(body)
}

/// `text` with every `⟨…⟩` span emptied to `⟨…⟩`. (tools/gpu/run does the same with
/// `sed 's/⟨[^⟩]*⟩/⟨…⟩/g'`.)
pub fn mask_measured(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('⟨') {
        let after = &rest[open + '⟨'.len_utf8()..];
        match after.find('⟩') {
            Some(close) if !after[..close].contains('\n') => {
                out.push_str(&rest[..open]);
                out.push_str("⟨…⟩");
                rest = &after[close + '⟩'.len_utf8()..];
            }
            _ => {
                out.push_str(&rest[..open + '⟨'.len_utf8()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The numbers inside `⟨ ⟩` on the lines of `text` that start with `prefix`, in order: what an
/// example's test checks against a tolerance where the snapshot holds `⟨…⟩`. Panics on a span
/// that is not a number.
pub fn measured(text: &str, prefix: &str) -> Vec<f64> {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .flat_map(|l| {
            l.split('⟨')
                .skip(1)
                .map(|s| s.split('⟩').next().unwrap().parse::<f64>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn normalize(s: &str) -> String {
    mask_measured(&s.replace("\r\n", "\n"))
        .trim_end_matches('\n')
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNAP: &str = "---\nsource: tests/ch01_example.rs\nexpression: stdout\n---\nbackend: emu\n---\nids: 3 1\n";

    #[test]
    fn strips_the_header_only() {
        assert_eq!(body_start_line(SNAP), Some(5));
        // A `---` inside the body (a third one) stays in the body.
        assert_eq!(strip_header(SNAP).unwrap(), "backend: emu\n---\nids: 3 1\n");
    }

    #[test]
    fn measured_numbers_are_masked() {
        assert_eq!(
            mask_measured("err ⟨2.1e-6⟩ and ⟨3⟩ tol 1e-5"),
            "err ⟨…⟩ and ⟨…⟩ tol 1e-5"
        );
        assert!(same_output("a ⟨1.0e-6⟩\n", "a ⟨…⟩"));
        assert!(!same_output("a ⟨1.0e-6⟩ b", "a ⟨…⟩ c"));
        // An unclosed bracket, or one closed on another line, is text like any other.
        assert_eq!(mask_measured("⟨open\nx⟩"), "⟨open\nx⟩");
    }

    #[test]
    fn measured_numbers_are_read_by_line() {
        let text = "err: a ⟨2.1e-6⟩ b ⟨3⟩\nother ⟨9⟩\nerr: ⟨0.5⟩\n";
        assert_eq!(measured(text, "err:"), vec![2.1e-6, 3.0, 0.5]);
        assert!(measured(text, "none").is_empty());
    }

    #[test]
    fn empty_body_and_missing_header() {
        assert_eq!(strip_header("---\nsource: x\n---\n").unwrap(), "");
        assert!(strip_header("ids: 3 1\n")
            .unwrap_err()
            .contains("not an insta snapshot"));
        assert!(strip_header("---\nsource: x\n").is_err());
        assert_eq!(body_start_line("---\nsource: x\n"), None);
    }

    #[test]
    fn compares_modulo_trailing_newline() {
        let body = strip_header(SNAP).unwrap();
        assert!(same_output("backend: emu\n---\nids: 3 1\n", &body));
        assert!(same_output("backend: emu\n---\nids: 3 1", &body));
        assert!(!same_output("backend: emu\n---\nids: 3 2\n", &body));
        assert!(!same_output(" backend: emu\n---\nids: 3 1\n", &body));
    }
}
