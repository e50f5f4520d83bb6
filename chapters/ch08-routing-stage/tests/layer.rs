//! Chapter 6's layer with the routing stage ([`StagedLayer`]) on every regime of chapters 2 and
//! 4, both logits GEMMs and every path of chapter 4, and on every layer of chapter 2's Hugging
//! Face fixtures: the same output bits and the same routing as chapter 6's layer (the stage gives
//! the pair's ids and weights and chapter 3's layout, and chapter 4 runs the same kernels on
//! them), and within chapter 2's tolerance of the literal loop; the stage on every path there
//! ([`StagedLayer::stage_everywhere`]), and the rule that runs it only where chapter 4 reads a
//! layout; the launches (the align's gone); a workspace of another layer refused.

use ch02_grouped::conformance::{check_layer, hf_layers, oracle};
use ch02_grouped::regimes::{regime, MoeRegime, REGIMES};
use ch02_grouped::{Dtype, MoeLayer};
use ch04_fused_moe::regimes::{fused_regime, FUSED_REGIMES};
use ch04_fused_moe::Path;
use ch05_fused_router::LogitsFrom;
use ch06_layer::AssembledLayer;
use ch08_routing_stage::StagedLayer;
use half::bf16;
use moe_kernels::testing::assert_same_bits;
use moe_kernels::Device;

fn round(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect()
}

/// Chapter 2's regimes, then chapter 4's, made bf16-exact (as chapter 6's tests make them).
fn every_regime() -> impl Iterator<Item = MoeRegime> {
    REGIMES
        .iter()
        .chain(FUSED_REGIMES)
        .map(|n| regime(n).or_else(|| fused_regime(n)).unwrap())
        .map(|mut r| {
            r.hidden = round(&r.hidden);
            r.weights.gate = round(&r.weights.gate);
            r
        })
}

fn layers(
    dev: &'static Device,
    r: &MoeRegime,
    from: LogitsFrom,
    path: Path,
) -> (AssembledLayer, StagedLayer) {
    let make = || {
        AssembledLayer::new(dev, &r.weights)
            .unwrap()
            .with_logits(from)
            .map_experts(|e| Ok(e.with_path(path)))
            .unwrap()
    };
    (make(), StagedLayer::new(make()).unwrap().stage_everywhere())
}

// ANCHOR: same_bits_as_chapter_6
fn staged_layer_gives_chapter_6s_bits(dev: &'static Device) {
    for r in every_regime() {
        let o = oracle(&r, Dtype::Bf16);
        let froms = match r.weights.config.hidden % 8 {
            0 => vec![LogitsFrom::TinyGemm, LogitsFrom::Blas],
            _ => vec![LogitsFrom::Blas],
        };
        for from in froms {
            for path in Path::ALL {
                let what = format!("{} ({from:?} logits, {path} path)", r.name);
                let (assembled, staged) = layers(dev, &r, from, path);
                let want = assembled.forward(&r.hidden).unwrap();
                let got = staged
                    .forward(&r.hidden)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(got.routing.ids, want.routing.ids, "{what}: ids");
                assert_same_bits(
                    &format!("{what}: weights"),
                    &got.routing.weights,
                    &want.routing.weights,
                );
                assert_same_bits(&format!("{what}: output"), &got.out, &want.out);
                // And against chapter 2's literal loop, independently of chapter 6.
                check_layer(&r, &o, &staged).unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        }
    }
}
// ANCHOR_END: same_bits_as_chapter_6

fn staged_layer_gives_chapter_6s_bits_on_hugging_face_layers(dev: &'static Device) {
    for hf in hf_layers() {
        for path in Path::ALL {
            let what = format!("{} layer {} ({path} path)", hf.fixture, hf.layer);
            let make = || {
                AssembledLayer::new(dev, &hf.weights)
                    .unwrap()
                    .map_experts(|e| Ok(e.with_path(path)))
                    .unwrap()
            };
            let want = make().forward(&hf.hidden).unwrap();
            let got = StagedLayer::new(make())
                .unwrap()
                .stage_everywhere()
                .forward(&hf.hidden)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(got.routing.ids, want.routing.ids, "{what}: ids");
            assert_same_bits(&format!("{what}: output"), &got.out, &want.out);
        }
    }
}

/// The stage's launches replace the router's and the align's: at one token (decode path) the
/// same count as chapter 6's; on the tiled path the align's launches are gone, and the stage's
/// one or two replace the router's one.
fn launches_without_the_align(dev: &'static Device) {
    let r = every_regime()
        .find(|r| r.name == "large_prefill")
        .unwrap_or_else(|| every_regime().last().unwrap());
    let (assembled, staged) = layers(dev, &r, LogitsFrom::Blas, Path::Tiled);
    let rows = r.hidden.len() / r.weights.config.hidden;
    let a = assembled.workspace(rows).unwrap();
    let s = staged.workspace(rows).unwrap();
    let align = assembled
        .experts_layer()
        .align_launches(a.experts_workspace());
    assert!(align >= 1, "{}: the tiled path aligns", r.name);
    assert_eq!(
        staged.launches(&s),
        assembled.launches(&a) - align - 1 + s.stage().expect("the tiled path stages").launches(),
        "{}",
        r.name
    );
}

// ANCHOR: stage_where_read
/// The rule: the stage runs where chapter 4's plan reads a layout (BLOCK_M > 0) and nowhere
/// else; elsewhere the layer is chapter 6's, launch for launch and bit for bit. On every forced
/// path and on the path chapter 4's plan picks, at every regime's batch.
fn stage_only_where_a_layout_is_read(dev: &'static Device) {
    let (mut staged_seen, mut pair_seen) = (0, 0);
    for r in every_regime() {
        let rows = r.hidden.len() / r.weights.config.hidden;
        let forced = Path::ALL.iter().map(|&p| Some(p));
        for path in forced.chain([None]) {
            let make = || {
                let l = AssembledLayer::new(dev, &r.weights).unwrap();
                match path {
                    Some(p) => l.map_experts(|e| Ok(e.with_path(p))).unwrap(),
                    None => l,
                }
            };
            let what = format!("{} ({path:?} path)", r.name);
            let (assembled, staged) = (make(), StagedLayer::new(make()).unwrap());
            let s = staged.workspace(rows).unwrap();
            let a = assembled.workspace(rows).unwrap();
            let reads_layout = s.experts_workspace().block_m() > 0;
            assert_eq!(s.stage().is_some(), reads_layout, "{what}");
            if reads_layout {
                staged_seen += 1;
            } else {
                pair_seen += 1;
                assert_eq!(
                    staged.launches(&s),
                    assembled.launches(&a),
                    "{what}: launches"
                );
            }
            let want = assembled.forward(&r.hidden).unwrap();
            let got = staged.forward(&r.hidden).unwrap();
            assert_eq!(got.routing.ids, want.routing.ids, "{what}: ids");
            assert_same_bits(&format!("{what}: output"), &got.out, &want.out);
        }
    }
    assert!(
        staged_seen > 0 && pair_seen > 0,
        "{staged_seen} staged, {pair_seen} pair"
    );
}
// ANCHOR_END: stage_where_read

fn another_layers_workspace_is_refused(dev: &'static Device) {
    let r = every_regime().next().unwrap();
    let (_, one) = layers(dev, &r, LogitsFrom::Blas, Path::Tiled);
    let (_, two) = layers(dev, &r, LogitsFrom::Blas, Path::Tiled);
    let rows = r.hidden.len() / r.weights.config.hidden;
    let ws = one.workspace(rows).unwrap();
    let x = dev.upload(&vec![bf16::ZERO; r.hidden.len()]).unwrap();
    let out = dev.alloc::<f32>(r.hidden.len()).unwrap();
    let e = two.enqueue(&ws, &x, &out).unwrap_err();
    assert!(e.to_string().contains("another layer"), "{e}");
    let short = dev.alloc::<f32>(3).unwrap();
    let e = one.enqueue(&ws, &x, &short).unwrap_err();
    assert!(e.to_string().contains("out [T, H]"), "{e}");
}

moe_kernels::backend_tests!(
    staged_layer_gives_chapter_6s_bits,
    staged_layer_gives_chapter_6s_bits_on_hugging_face_layers,
    launches_without_the_align,
    stage_only_where_a_layout_is_read,
    another_layers_workspace_is_refused,
);
