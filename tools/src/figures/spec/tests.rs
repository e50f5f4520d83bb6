//! The spec engine's tests: each builds a small CSV and a spec, and checks the file text.

use super::*;

const T: Csv = Csv {
    path: "t.csv",
    run: None,
};
const TEXT: &str = "shape,impl,rows,us,note\n\
    glm_a,x,1,2.5,one\nglm_a,x,10,1234.5,ten\nglm_a,y,1,5.0,-\nglm_a,x,9,7.0,nine\n\
    qwen_b,x,1,3.0,q\n";

fn data() -> Data {
    let mut d = Data::default();
    d.add(&T, TEXT).unwrap();
    d
}

fn run_facts(items: &[Item]) -> Result<Facts, String> {
    let mut f = Facts::default();
    facts(&data(), "spec.rs", items, &mut f)?;
    Ok(f)
}

const X: Value = Value::Col {
    csv: &T,
    rows: "shape={shape} impl=x rows={n}",
    col: "us",
};
const Y: Value = Value::Col {
    csv: &T,
    rows: "shape={shape} impl=y rows={n}",
    col: "us",
};
const SHAPES: Loop = Loop {
    var: "shape",
    over: Over::Csv {
        csv: &T,
        rows: "",
        col: "shape",
        numeric: false,
    },
    name: Name::Prefix,
};
const ROWS: Loop = Loop {
    var: "n",
    over: Over::Csv {
        csv: &T,
        rows: "shape={shape} impl=x",
        col: "rows",
        numeric: true,
    },
    name: Name::AsIs,
};

#[test]
fn loops_name_their_values_and_keep_numeric_order() {
    #[rustfmt::skip]
    const ITEMS: &[Item] = &[each!(SHAPES, [each!(ROWS, [
        fact!("{shape}_{n}", X, Fmt::Us),
        fact!(? "{shape}_{n}_y_over_x", Value::Ratio(&Y, &X), Fmt::Fixed(2)),
    ])])];
    let f = run_facts(ITEMS).unwrap();
    let text = f.render("t");
    // 1, 9, 10: as numbers, not as text; glm before qwen: the CSV's order.
    let order: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("ANCHOR: "))
        .collect();
    assert_eq!(
        order,
        ["glm_1", "glm_1_y_over_x", "glm_9", "glm_10", "qwen_1"]
    );
    assert_eq!(f.get("glm_10"), Some("1234"));
    assert_eq!(f.get("glm_1_y_over_x"), Some("2.00"));
    assert!(text.contains("<!-- from t.csv -->"), "{text}");
}

#[test]
fn a_missing_row_is_an_error_naming_the_spec_line_and_the_csv() {
    const ITEMS: &[Item] = &[fact!(
        "gone",
        Value::Col {
            csv: &T,
            rows: "impl=z",
            col: "us"
        },
        Fmt::Us
    )];
    let e = run_facts(ITEMS).unwrap_err();
    let Item::Fact { line, .. } = &ITEMS[0] else {
        unreachable!()
    };
    assert_eq!(
        e,
        format!("spec.rs:{line}: fact `gone`: t.csv has no row with impl=z")
    );
    // Optional: left out of the file, not written empty.
    const OPTIONAL: &[Item] =
        &[fact!(? "gone", Value::Col { csv: &T, rows: "impl=z", col: "us" }, Fmt::Us)];
    let f = run_facts(OPTIONAL).unwrap();
    assert_eq!(f.get("gone"), None);
    assert!(!f.render("t").contains("ANCHOR"));
    // A filter that is not a condition, a column the CSV lacks: errors too.
    const BAD: &[Item] = &[fact!(
        "b",
        Value::Count {
            csv: &T,
            rows: "impl"
        },
        Fmt::Int
    )];
    assert!(run_facts(BAD).unwrap_err().contains("not `column=value`"));
    const NO_COL: &[Item] = &[fact!(
        "b",
        Value::Count {
            csv: &T,
            rows: "size=1"
        },
        Fmt::Int
    )];
    assert!(run_facts(NO_COL).unwrap_err().contains("no column `size`"));
}

#[test]
fn aggregates_and_conditions() {
    #[rustfmt::skip]
    const ITEMS: &[Item] = &[
        fact!("sum", Value::Sum { csv: &T, rows: "impl=x rows>1", col: "us" }, Fmt::Fixed(1)),
        fact!("count", Value::Count { csv: &T, rows: "impl!=y rows<=9" }, Fmt::Thousands),
        fact!("rows", Value::Distinct { csv: &T, rows: "shape=glm_a", col: "rows" }, Fmt::Raw),
        fact!("note", Value::Col { csv: &T, rows: "rows=9", col: "note" }, Fmt::Raw),
        fact!("c", Value::Const(1.4, "here"), Fmt::Plain),
        each!(SHAPES, [when!("shape=qwen_b", [
            fact!("{shape}_min", Value::Min(&ROWS, &X), Fmt::Us),
            fact!("{shape}_range", Value::Range(&ROWS, &X), Fmt::Us),
        ])]),
        each!(Loop { var: "shape", over: Over::List(&["glm_a"]), name: Name::AsIs }, [
            fact!("min", Value::Min(&ROWS, &X), Fmt::AtMost(2.5)),
            fact!("max", Value::Max(&ROWS, &X), Fmt::AtLeast(2000.0)),
            fact!("range", Value::Range(&ROWS, &X), Fmt::Us),
            fact!("diff", Value::Diff(&Value::Max(&ROWS, &X), &Value::Min(&ROWS, &X)), Fmt::Int),
        ]),
    ];
    let f = run_facts(ITEMS).unwrap();
    assert_eq!(f.get("sum"), Some("1241.5"));
    assert_eq!(f.get("count"), Some("3"));
    assert_eq!(f.get("rows"), Some("1–9–10"));
    assert_eq!(f.get("note"), Some("nine"));
    assert_eq!(f.get("c"), Some("1.4"));
    assert_eq!(f.get("qwen_min"), Some("3.00"));
    assert_eq!(f.get("qwen_range"), Some("3.00"));
    assert_eq!(f.get("glm_a_min"), None);
    assert_eq!(f.get("min"), Some("met"));
    assert_eq!(f.get("max"), Some("**missed**"));
    assert_eq!(f.get("range"), Some("2.50–1234"));
    assert_eq!(f.get("diff"), Some("1232"));
    assert!(f.render("t").contains("<!-- from here -->"));
    // Text in a number's format is an error, not a guess.
    const TEXT_AS_NUMBER: &[Item] = &[fact!(
        "n",
        Value::Col {
            csv: &T,
            rows: "rows=9",
            col: "note"
        },
        Fmt::Us
    )];
    assert!(run_facts(TEXT_AS_NUMBER)
        .unwrap_err()
        .contains("`nine` is not a number"));
}

#[test]
fn formats() {
    let n = |x: f64| Out::Num(x, String::new());
    assert_eq!(format(&n(0.6219), Fmt::Us).unwrap(), "0.62");
    assert_eq!(format(&n(12.34), Fmt::Us).unwrap(), "12.3");
    assert_eq!(format(&n(4194304.0), Fmt::Thousands).unwrap(), "4,194,304");
    assert_eq!(format(&n(0.0), Fmt::ThousandsBold).unwrap(), "0");
    assert_eq!(format(&n(1200.0), Fmt::ThousandsBold).unwrap(), "**1,200**");
    assert_eq!(format(&n(2.0), Fmt::Plain).unwrap(), "2");
    assert_eq!(format(&n(6.25), Fmt::Short).unwrap(), "6.2");
    assert_eq!(format(&n(93.75), Fmt::Short).unwrap(), "94");
    assert_eq!(format(&n(2.536e-4), Fmt::Sci(1)).unwrap(), "2.5e-4");
    assert_eq!(format(&n(1207.96), Fmt::Thousands).unwrap(), "1,208");
    assert_eq!(
        format(&Out::Num(3.5, "3.500".into()), Fmt::Raw).unwrap(),
        "3.500"
    );
    assert_eq!(format(&Out::Span(7.941, 7.944), Fmt::Us).unwrap(), "7.94");
    let t = |s: &str| Out::Text(s.into());
    assert_eq!(
        format(&t("1"), Fmt::Noun("launch", "launches")).unwrap(),
        "1 launch"
    );
    assert_eq!(
        format(&t("8–9"), Fmt::Noun("launch", "launches")).unwrap(),
        "8–9 launches"
    );
    assert!(format(&n(1.0), Fmt::Noun("a", "b")).is_err());
}

fn title(s: &str) -> String {
    s.to_uppercase()
}

const TABLE: Pivot = Pivot {
    line: 7,
    head: "<!-- t -->\n",
    blocks: Some(Loop {
        name: Name::Fn(title),
        ..SHAPES
    }),
    block_head: "**{shape}**\n\n",
    block_slots: &[],
    block_tail: "\n",
    corner: "",
    rows: Loop {
        var: "imp",
        over: Over::List(&["x", "y", "z"]),
        name: Name::Map(&[("x", "the x")]),
    },
    row_if: Some((&T, "shape={shape} impl={imp}")),
    cols: ROWS,
    label: Cell {
        text: "{row}",
        slots: &[],
    },
    cell: Cell {
        text: "{us}{over}",
        slots: &[
            Slot::new(
                "us",
                Value::Col {
                    csv: &T,
                    rows: "shape={shape} impl={imp} rows={n}",
                    col: "us",
                },
                Fmt::Us,
            ),
            Slot::optional(
                "over",
                Value::Ratio(&Y, &X),
                Fmt::Fixed(1),
                " ({}×)",
                "imp=x",
            ),
        ],
    },
    lead: &[],
    extra: &[Line::new(
        "sum",
        Cell {
            text: "{s}",
            slots: &[Slot::new(
                "s",
                Value::Sum {
                    csv: &T,
                    rows: "shape={shape} rows={n}",
                    col: "us",
                },
                Fmt::Fixed(0),
            )],
        },
    )],
    missing: Some("–"),
    transpose_as: None,
};

#[test]
fn a_pivot_lays_out_blocks_lines_and_cells() {
    let t = pivot(&data(), "spec.rs", &TABLE).unwrap();
    let want = "<!-- t -->\n**GLM_A**\n\n| | 1 | 9 | 10 |\n|---|---:|---:|---:|\n\
        | the x | 2.50 (2.0×) | 7.00 | 1234 |\n| y | 5.00 | – | – |\n| sum | 8 | 7 | 1234 |\n\n\
        **QWEN_B**\n\n| | 1 |\n|---|---:|\n| the x | 3.00 |\n| sum | 3 |\n\n";
    assert_eq!(t, want);
    // Without a text for a missing cell, one is an error naming the table's line.
    let strict = Pivot {
        missing: None,
        ..TABLE
    };
    let e = pivot(&data(), "spec.rs", &strict).unwrap_err();
    assert_eq!(
        e,
        "spec.rs:7: table: no cell at y, n=9: t.csv has no row with shape=glm_a impl=y rows=9"
    );
    // More columns than lines: swapped.
    let wide = Pivot {
        blocks: None,
        block_head: "",
        rows: Loop {
            var: "shape",
            over: Over::List(&["qwen_b"]),
            name: Name::AsIs,
        },
        row_if: None,
        cols: Loop {
            var: "n",
            over: Over::List(&["1", "9"]),
            name: Name::AsIs,
        },
        cell: Cell {
            text: "{n}",
            slots: &[],
        },
        extra: &[],
        transpose_as: Some("n"),
        ..TABLE
    };
    let t = pivot(&data(), "spec.rs", &wide).unwrap();
    assert!(
        t.contains("| n | qwen_b |\n|---|---:|\n| 1 | 1 |\n| 9 | 9 |\n"),
        "{t}"
    );
}

#[test]
fn a_group_leaves_out_what_a_missing_csv_makes() {
    const A: Csv = Csv {
        path: "a.csv",
        run: None,
    };
    const B: Csv = Csv {
        path: "b.csv",
        run: None,
    };
    fn no_nines(text: &str, name: &str) -> Result<(), String> {
        match text.contains('9') {
            true => Err(format!("{name}: a nine")),
            false => Ok(()),
        }
    }
    /// A file no spec describes: the CSV's text, reversed.
    fn drawn(d: &Data) -> Result<Option<String>, String> {
        Ok(Some(d.text(&A)?.chars().rev().collect()))
    }
    const G: Group = Group {
        name: "t",
        spec: "spec.rs",
        first: Source {
            csv: &A,
            absent: Absent::GpuRun {
                stage: "bench",
                copy: "a.csv",
                left_out: "all",
            },
            check: Some(no_nines),
        },
        reads: &[],
        parts: &[
            Part {
                needs: &[],
                files: &[Make::Drawn("a.txt", drawn)],
                facts: &[fact!("a", Value::sum(&A, "", "v"), Fmt::Int)],
            },
            Part {
                needs: &[Source {
                    csv: &B,
                    absent: Absent::Quiet,
                    check: None,
                }],
                files: &[],
                facts: &[fact!("b", Value::sum(&B, "", "v"), Fmt::Int)],
            },
        ],
        facts: "f.md",
        facts_title: "t",
    };
    let dir = std::env::temp_dir().join(format!("spec-group-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // No first CSV: nothing, and no error while nothing made from it is committed.
    assert_eq!(generate(&dir, &G).unwrap(), Vec::new());
    std::fs::write(dir.join("f.md"), "old").unwrap();
    assert!(generate(&dir, &G)
        .unwrap_err()
        .contains("cannot be regenerated"));
    // The first CSV alone: its facts; the second's part left out.
    std::fs::write(dir.join("a.csv"), "v\n1\n2\n").unwrap();
    let files = generate(&dir, &G).unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0].content, "\n2\n1\nv");
    assert!(
        files[1].content.contains("ANCHOR: a\n3\n"),
        "{}",
        files[1].content
    );
    assert!(!files[1].content.contains("ANCHOR: b"));
    std::fs::write(dir.join("b.csv"), "v\n5\n").unwrap();
    let files = generate(&dir, &G).unwrap();
    assert!(
        files[1].content.contains("ANCHOR: b\n5\n"),
        "{}",
        files[1].content
    );
    // The check runs before the CSV is read.
    std::fs::write(dir.join("a.csv"), "v\n9\n").unwrap();
    assert_eq!(generate(&dir, &G).unwrap_err(), "a.csv: a nine");
    // A CSV always committed: its absence is an error, not a group left out.
    const ALWAYS: Group = Group {
        first: Source {
            csv: &B,
            absent: Absent::Never,
            check: None,
        },
        parts: &[],
        ..G
    };
    std::fs::remove_file(dir.join("b.csv")).unwrap();
    let e = generate(&dir, &ALWAYS).unwrap_err();
    assert!(e.starts_with("cannot read b.csv"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn extra_lines_slots_with_a_default_scales_and_alternatives() {
    const ANY: Value = Value::Col {
        csv: &T,
        rows: "shape={shape} impl={imp} rows={n}",
        col: "us",
    };
    const T2: Pivot = Pivot {
        line: 1,
        blocks: Some(SHAPES),
        // A block head with a value: the shape's `y` note where it has one.
        block_head: "{shape}{note}\n",
        block_slots: &[Slot::optional(
            "note",
            Value::Col {
                csv: &T,
                rows: "shape={shape} impl=y",
                col: "note",
            },
            Fmt::Raw,
            " ({})",
            "",
        )],
        rows: Loop::list("imp", &["x"]),
        cols: ROWS.named(Name::Plural("row")),
        lead: &[Line::new(
            "first",
            Cell {
                text: "{n}",
                slots: &[],
            },
        )],
        cell: Cell {
            text: "{v}",
            slots: &[Slot::new("v", Value::Times(100.0, &X), Fmt::Fixed(0))],
        },
        extra: &[
            // Only where the shape has a `y` row; `–` where `y` is missing at a row count.
            Line::new(
                "y",
                Cell {
                    text: "{x} · {y}",
                    slots: &[
                        Slot::or("x", X, Fmt::Raw, "–"),
                        Slot::or("y", Y, Fmt::Raw, "–"),
                    ],
                },
            )
            .only_if(&T, "shape={shape} impl=y"),
            // A label of values: the loop's values, joined; a cell likewise, `–` where missing.
            Line::new(
                "{imps}",
                Cell {
                    text: "{j}",
                    slots: &[Slot::new(
                        "j",
                        Value::Join {
                            each: &Loop::list("imp", &["x", "y"]),
                            value: &ANY,
                            fmt: Fmt::Raw,
                            sep: " · ",
                            or: "–",
                        },
                        Fmt::Raw,
                    )],
                },
            )
            .labelled(&[Slot::new(
                "imps",
                Value::Join {
                    each: &Loop::list("imp", &["x", "y"]),
                    value: &Value::Var("imp"),
                    fmt: Fmt::Raw,
                    sep: "+",
                    or: "",
                },
                Fmt::Raw,
            )]),
            Line::new(
                "k",
                Cell {
                    text: "{k}",
                    slots: &[Slot::new("k", Value::Per(&X, 1e3), Fmt::Fixed(4))],
                },
            ),
        ],
        ..Pivot::PLAIN
    };
    let t = pivot(&data(), "spec.rs", &T2).unwrap();
    assert_eq!(
        t,
        "glm (-)\n| | 1 row | 9 rows | 10 rows |\n|---|---:|---:|---:|\n| first | 1 row | 9 rows | 10 rows |\n\
         | x | 250 | 700 | 123450 |\n\
         | y | 2.5 · 5.0 | 7.0 · – | 1234.5 · – |\n| x+y | 2.5 · 5.0 | 7.0 · – | 1234.5 · – |\n\
         | k | 0.0025 | 0.0070 | 1.2345 |\n\
         qwen\n| | 1 row |\n|---|---:|\n| first | 1 row |\n| x | 300 |\n| x+y | 3.0 · – |\n\
         | k | 0.0030 |\n"
    );
    // `=` with alternatives: either value matches.
    #[rustfmt::skip]
    const ITEMS: &[Item] = &[
        fact!("xy", Value::Count { csv: &T, rows: "impl=x|y rows=1" }, Fmt::Int),
        fact!("x", Value::Count { csv: &T, rows: "impl=x|z rows=1" }, Fmt::Int),
        each!(Loop::list("imp", &["y"]), [each!(SHAPES, [each!(Loop::list("n", &["1"]), [
            fact!(? "{shape}_{imp}", ANY, Fmt::Us),
        ])])]),
    ];
    let f = run_facts(ITEMS).unwrap();
    assert_eq!(f.get("xy"), Some("3"));
    assert_eq!(f.get("x"), Some("2"));
    assert_eq!(f.get("glm_y"), Some("5.00"));
    assert_eq!(f.get("qwen_y"), None);
}

/// A named value reading a second CSV through [`Ctx::with`]: only its own CSV is its source.
#[test]
fn facts_that_stand_or_fall_together() {
    #[rustfmt::skip]
    const ITEMS: &[Item] = &[each!(SHAPES, [
        if_rows!(&T, ["shape={shape} impl=x", "shape={shape} impl=y"], [
            fact!("{shape}_both", Value::Count { csv: &T, rows: "shape={shape}" }, Fmt::Int),
        ]),
    ])];
    let f = run_facts(ITEMS).unwrap();
    // glm has x and y; qwen has x alone.
    assert_eq!(f.get("glm_both"), Some("4"));
    assert_eq!(f.get("qwen_both"), None);
}

#[test]
fn a_ranked_loop_keeps_and_orders_by_rank() {
    // `y` first, then `x`; any other value left out.
    fn rank(v: &str) -> Option<usize> {
        match v {
            "y" => Some(0),
            "x" => Some(1),
            _ => None,
        }
    }
    const ITEMS: &[Item] = &[each!(
        Loop::ranked("imp", &T, "", "impl", rank),
        [fact!(
            "{imp}",
            Value::Count {
                csv: &T,
                rows: "impl={imp}"
            },
            Fmt::Int
        )]
    )];
    let f = run_facts(ITEMS).unwrap();
    let text = f.render("t");
    let order: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("ANCHOR: "))
        .collect();
    assert_eq!(order, ["y", "x"]);
    assert_eq!(f.get("x"), Some("4"));
}

#[test]
fn a_named_value_reads_another_csv() {
    const C: Csv = Csv::at("c.csv");
    fn scaled(c: &Ctx) -> Result<Option<f64>, String> {
        let k = c.with(&C)?;
        let kr = k.rows("")?;
        let x = c.rows("shape=qwen_b")?;
        Ok(Some(c.num(x[0], "us")? * k.num(kr[0], "k")?))
    }
    let mut d = data();
    d.add(&C, "k\n4\n").unwrap();
    const ITEMS: &[Item] = &[fact!("s", Value::named(&T, scaled), Fmt::Plain)];
    let mut f = Facts::default();
    facts(&d, "spec.rs", ITEMS, &mut f).unwrap();
    assert_eq!(f.get("s"), Some("12"));
    assert!(!f.render("t").contains("c.csv"));
    // A text value: written as it is; `None` a missing value, which an optional fact leaves out.
    fn listed(c: &Ctx) -> Result<Option<String>, String> {
        let rows = c.rows("impl=x")?;
        Ok((rows.len() > 1).then(|| format!("{} rows", rows.len())))
    }
    fn none(_: &Ctx) -> Result<Option<String>, String> {
        Ok(None)
    }
    const TEXTS: &[Item] = &[
        fact!("l", Value::NamedText { csv: &T, f: listed }, Fmt::Raw),
        fact!(? "n", Value::NamedText { csv: &T, f: none }, Fmt::Raw),
    ];
    let mut f = run_facts(TEXTS).unwrap();
    assert_eq!(f.get("l"), Some("4 rows"));
    assert_eq!(f.get("n"), None);
    // Not read: an error naming the CSV.
    let e = facts(&data(), "spec.rs", ITEMS, &mut f).unwrap_err();
    assert!(e.contains("c.csv: not read"), "{e}");
}

/// The pages' `gpu` fact: the one GPU every CSV with a `device` column names; an error where two
/// CSVs of one group name different GPUs; none where no CSV has the column.
#[test]
fn the_gpu_is_one_or_an_error() {
    const A: Csv = Csv::at("a.csv");
    const B: Csv = Csv::at("b.csv");
    let mut d = Data::default();
    d.add(&T, TEXT).unwrap();
    assert_eq!(d.gpu(), Ok(None));
    d.add(
        &A,
        "x,device\n1,NVIDIA_H100_80GB_HBM3\n2,NVIDIA_H100_80GB_HBM3\n",
    )
    .unwrap();
    assert_eq!(d.gpu(), Ok(Some("H100".to_string())));
    d.add(&B, "x,device\n1,NVIDIA_H200\n").unwrap();
    let e = d.gpu().unwrap_err();
    assert!(
        e.contains("a.csv, b.csv") && e.contains("H100, H200"),
        "{e}"
    );
}
