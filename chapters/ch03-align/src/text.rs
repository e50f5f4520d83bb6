//! The layout as a reader looks at it: sorted pairs drawn with `|` at tile edges and `·` for
//! placeholders, and the tile → expert list. Snapshots store this text.

use crate::layout::Aligned;

/// `pairs` is T·k, the placeholder's value. At most `max_tiles` tiles are drawn.
pub fn draw(a: &Aligned, pairs: usize, block_m: usize, max_tiles: usize) -> String {
    let tiles = a.tiles(block_m);
    let mut s = String::new();
    for tile in 0..tiles.min(max_tiles) {
        let slots = &a.sorted_ids[tile * block_m..(tile + 1) * block_m];
        let cells: Vec<String> = slots
            .iter()
            .map(|&p| {
                if p as usize == pairs {
                    "·".to_string()
                } else {
                    p.to_string()
                }
            })
            .collect();
        s += &format!(
            "tile {tile:3} expert {:3} | {} |\n",
            a.expert_ids[tile],
            cells.join(" ")
        );
    }
    if tiles > max_tiles {
        s += &format!("… {} more tiles\n", tiles - max_tiles);
    }
    s += &format!(
        "{} slots in {tiles} tiles for {pairs} pairs ({} padding)\n",
        a.num_tokens_post_padded,
        a.num_tokens_post_padded as usize - pairs.min(a.num_tokens_post_padded as usize)
    );
    s
}
