//! The one CSV reader of the tools and the bench: plain comma-separated text with a header line,
//! no quoting (none of our files needs it). Blank lines are skipped, but every row keeps its line
//! number in the file, so each reader's errors can say `file:line, column`.

/// One data row: its fields, trimmed, and its line number (1-based) in the file.
#[derive(Debug, Clone)]
pub struct Row {
    pub line: usize,
    pub fields: Vec<String>,
}

/// A parsed CSV: the header and rows with as many fields as the header.
#[derive(Debug, Clone)]
pub struct Table {
    name: String,
    header_line: usize,
    header: Vec<String>,
    rows: Vec<Row>,
}

fn fields(line: &str) -> Vec<String> {
    line.split(',').map(|s| s.trim().to_string()).collect()
}

impl Table {
    /// Parses `text`, naming it `name` in errors: an empty file, or a row whose field count is
    /// not the header's, is an error.
    pub fn parse(text: &str, name: &str) -> Result<Table, String> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (h, head) = lines
            .next()
            .ok_or_else(|| format!("{name}: empty file (expected a header line)"))?;
        let header = fields(head);
        let mut rows = Vec::new();
        for (i, l) in lines {
            let f = fields(l);
            if f.len() != header.len() {
                return Err(format!(
                    "{name}:{}: expected {} fields, found {}",
                    i + 1,
                    header.len(),
                    f.len()
                ));
            }
            rows.push(Row {
                line: i + 1,
                fields: f,
            });
        }
        Ok(Table {
            name: name.to_string(),
            header_line: h + 1,
            header,
            rows,
        })
    }

    /// The name errors use (usually the file's path).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The header's line number and fields.
    pub fn header(&self) -> (usize, &[String]) {
        (self.header_line, &self.header)
    }

    /// The data rows, in file order.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// The index of column `c`.
    pub fn col(&self, c: &str) -> Result<usize, String> {
        self.header
            .iter()
            .position(|h| h == c)
            .ok_or(format!("{}: no column `{c}`", self.name))
    }

    /// The value in column `c` of the first row whose columns match every `(column, value)`.
    pub fn get(&self, matches: &[(&str, &str)], c: &str) -> Result<String, String> {
        let ci = self.col(c)?;
        let idx: Vec<(usize, &str)> = matches
            .iter()
            .map(|(k, v)| self.col(k).map(|i| (i, *v)))
            .collect::<Result<_, _>>()?;
        self.rows
            .iter()
            .find(|r| idx.iter().all(|(i, v)| r.fields[*i] == *v))
            .map(|r| r.fields[ci].clone())
            .ok_or(format!("{}: no row with {matches:?}", self.name))
    }

    /// [`Table::get`] as a number.
    pub fn num(&self, matches: &[(&str, &str)], c: &str) -> Result<f64, String> {
        let v = self.get(matches, c)?;
        v.parse()
            .map_err(|_| format!("{}: `{v}` in column `{c}` is not a number", self.name))
    }

    /// Every row, as `(column → value)` lookups (an unknown column reads as empty).
    pub fn records(&self) -> impl Iterator<Item = impl Fn(&str) -> String + '_> + '_ {
        self.rows.iter().map(move |r| {
            move |c: &str| {
                self.header
                    .iter()
                    .position(|h| h == c)
                    .map(|i| r.fields[i].clone())
                    .unwrap_or_default()
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_numbers_survive_blank_lines() {
        let t = Table::parse("\na,b\n1,2\n\n3,4\n", "x.csv").unwrap();
        assert_eq!(t.header().0, 2);
        let lines: Vec<usize> = t.rows().iter().map(|r| r.line).collect();
        assert_eq!(lines, vec![3, 5]);
        assert_eq!(t.num(&[("a", "3")], "b").unwrap(), 4.0);
        let e = Table::parse("a,b\n1,2\n\n3\n", "x.csv").unwrap_err();
        assert_eq!(e, "x.csv:4: expected 2 fields, found 1");
        assert!(Table::parse(" \n", "x.csv")
            .unwrap_err()
            .contains("empty file"));
        assert_eq!(t.col("c").unwrap_err(), "x.csv: no column `c`");
    }
}
