//! A small HTML tag scanner: enough to read the `href`, `src`, `id` and `name` attributes of the
//! pages mdbook generates, without a parser crate. It skips comments, the doctype, end tags and
//! the raw text of `<script>`, `<style>`, `<textarea>` and `<title>` (mdbook's inline JavaScript
//! may spell `href="…"` inside a string, which is not a link), and decodes character references
//! in attribute values, since `&amp;` in an `href` is a plain `&` to the browser.

/// One start tag: its lower-cased name and its attributes in document order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    /// Lower-cased, as HTML names are case-insensitive.
    pub name: String,
    /// `(lower-cased name, decoded value)`; an attribute without `=` has an empty value.
    pub attrs: Vec<(String, String)>,
}

impl Tag {
    /// The value of an attribute; the first one wins when it is repeated, as in browsers.
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Elements whose content is text up to their end tag, never markup.
const RAW_TEXT: [&str; 4] = ["script", "style", "textarea", "title"];

/// Every start tag of a document, in order.
pub fn scan(html: &str) -> Vec<Tag> {
    let b = html.as_bytes();
    let mut tags = Vec::new();
    let mut i = 0;
    while let Some(off) = html[i..].find('<') {
        let lt = i + off;
        let rest = &html[lt..];
        if let Some(after) = rest.strip_prefix("<!--") {
            i = after.find("-->").map_or(html.len(), |e| lt + 4 + e + 3);
        } else if rest.starts_with("<!") || rest.starts_with("<?") || rest.starts_with("</") {
            i = rest.find('>').map_or(html.len(), |e| lt + e + 1);
        } else if b.get(lt + 1).is_some_and(u8::is_ascii_alphabetic) {
            let (tag, end) = parse_tag(html, lt + 1);
            i = end;
            if RAW_TEXT.contains(&tag.name.as_str()) {
                i = raw_text_end(html, i, &tag.name);
            }
            tags.push(tag);
        } else {
            i = lt + 1;
        }
    }
    tags
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')
}

/// Parses the tag whose name starts at `start` (just after `<`); returns it and the offset
/// just after its `>` (or the end of the text when the tag is never closed).
fn parse_tag(html: &str, start: usize) -> (Tag, usize) {
    let b = html.as_bytes();
    let len = b.len();
    let mut i = start;
    while i < len && !is_space(b[i]) && b[i] != b'/' && b[i] != b'>' {
        i += 1;
    }
    let name = html[start..i].to_ascii_lowercase();
    let mut attrs = Vec::new();
    loop {
        while i < len && (is_space(b[i]) || b[i] == b'/') {
            i += 1;
        }
        if i >= len {
            break;
        }
        if b[i] == b'>' {
            i += 1;
            break;
        }
        // The name's first character is taken whatever it is (even `=`), as browsers do.
        let name_start = i;
        i += 1;
        while i < len && !is_space(b[i]) && !matches!(b[i], b'/' | b'>' | b'=') {
            i += 1;
        }
        let attr_name = html[name_start..i].to_ascii_lowercase();
        let mut j = i;
        while j < len && is_space(b[j]) {
            j += 1;
        }
        let mut value = "";
        if j < len && b[j] == b'=' {
            j += 1;
            while j < len && is_space(b[j]) {
                j += 1;
            }
            if j < len && (b[j] == b'"' || b[j] == b'\'') {
                let quote = b[j] as char;
                let from = j + 1;
                let to = html[from..].find(quote).map_or(len, |e| from + e);
                value = &html[from..to];
                i = (to + 1).min(len);
            } else {
                let from = j;
                while j < len && !is_space(b[j]) && b[j] != b'>' {
                    j += 1;
                }
                value = &html[from..j];
                i = j;
            }
        }
        attrs.push((attr_name, decode_entities(value)));
    }
    (Tag { name, attrs }, i)
}

/// The offset of the end tag `</name` that closes a raw-text element, searched from `from`
/// case-insensitively (the end of the text if there is none).
fn raw_text_end(html: &str, from: usize, name: &str) -> usize {
    let b = html.as_bytes();
    let mut i = from;
    while let Some(off) = html[i..].find("</") {
        let at = i + off;
        let name_end = at + 2 + name.len();
        if name_end <= b.len()
            && b[at + 2..name_end].eq_ignore_ascii_case(name.as_bytes())
            && b.get(name_end)
                .is_none_or(|&c| is_space(c) || c == b'/' || c == b'>')
        {
            return at;
        }
        i = at + 2;
    }
    html.len()
}

/// Decodes character references (`&amp;`, `&#39;`, `&#x2F;`, …) in an attribute value; an
/// unknown or malformed reference stays as written.
pub fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let decoded = rest[1..]
            .find(';')
            .filter(|&k| k > 0 && k <= 32)
            .and_then(|k| Some((entity(&rest[1..1 + k])?, k)));
        match decoded {
            Some((c, k)) => {
                out.push(c);
                rest = &rest[k + 2..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The character a reference stands for, given the text between `&` and `;`.
fn entity(name: &str) -> Option<char> {
    if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse::<u32>().ok()?,
        };
        return char::from_u32(code);
    }
    Some(match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => '\u{a0}',
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(html: &str) -> Vec<String> {
        scan(html).into_iter().map(|t| t.name).collect()
    }

    #[test]
    fn reads_quoted_unquoted_and_bare_attributes() {
        let tags = scan("<A HREF='a.html' class=x id = \"top\" hidden data-x=1/><img src=fig.svg>");
        assert_eq!(tags.len(), 2);
        assert_eq!(tags[0].name, "a");
        assert_eq!(tags[0].attr("href"), Some("a.html"));
        assert_eq!(tags[0].attr("class"), Some("x"));
        assert_eq!(tags[0].attr("id"), Some("top"));
        assert_eq!(tags[0].attr("hidden"), Some(""));
        // An unquoted value runs to a space or `>`; `/` is part of it.
        assert_eq!(tags[0].attr("data-x"), Some("1/"));
        assert_eq!(tags[1].attr("src"), Some("fig.svg"));
    }

    #[test]
    fn skips_comments_end_tags_and_raw_text() {
        let html = "<!DOCTYPE html><!-- <a href=\"no.html\"> --><p>x</p>\
                    <script>var s = '<a href=\"js.html\">'; if (a < b) {}</script>\
                    <style>a[href=\"css.html\"] {}</style><title><a href=t.html></title>\
                    <SCRIPT type=x>'</script'</SCRIPT ><a href=\"yes.html\">";
        let tags = scan(html);
        assert_eq!(
            names(html),
            ["p", "script", "style", "title", "script", "a"]
        );
        assert_eq!(tags.last().unwrap().attr("href"), Some("yes.html"));
    }

    #[test]
    fn first_of_a_repeated_attribute_wins() {
        let tags = scan("<a id=one id=two>");
        assert_eq!(tags[0].attr("id"), Some("one"));
    }

    #[test]
    fn unterminated_input_does_not_panic() {
        for html in [
            "<a href=\"x",
            "<a href=",
            "<!-- x",
            "<script>x",
            "<",
            "<a",
            "<é>",
            "&",
        ] {
            let _ = scan(html);
        }
        assert_eq!(scan("<a href=\"x")[0].attr("href"), Some("x"));
    }

    #[test]
    fn decodes_character_references() {
        assert_eq!(decode_entities("a&amp;b"), "a&b");
        assert_eq!(decode_entities("&#39;&#x2F;&#X41;&quot;"), "'/A\"");
        assert_eq!(decode_entities("&unknown; & &amp"), "&unknown; & &amp");
        assert_eq!(decode_entities("caf&eacute;"), "caf&eacute;");
        assert_eq!(decode_entities("é&lt;ü"), "é<ü");
    }
}
