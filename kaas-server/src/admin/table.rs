//! What `kaas admin` prints: named tables, aligned for a terminal (`--output table`) or as one
//! JSON object of arrays of objects for a script (`--output json`).

use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub name: &'static str,
    pub headers: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(name: &'static str, headers: &[&'static str]) -> Table {
        Table { name, headers: headers.to_vec(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.headers.len(), "{}: a cell per column", self.name);
        self.rows.push(cells);
    }
}

/// Shorthand for a row's cells.
#[macro_export]
macro_rules! cells {
    ($($cell:expr),* $(,)?) => { vec![$($cell.to_string()),*] };
}

/// The text `tables` print as.
pub fn render(tables: &[Table], output: Output) -> String {
    match output {
        Output::Json => {
            let mut doc = Map::new();
            for t in tables {
                let rows = t
                    .rows
                    .iter()
                    .map(|r| {
                        let fields = t.headers.iter().zip(r).map(|(h, c)| (key(h), cell_value(c)));
                        Value::Object(fields.collect())
                    })
                    .collect();
                doc.insert(t.name.to_string(), Value::Array(rows));
            }
            format!("{}\n", serde_json::to_string_pretty(&Value::Object(doc)).expect("JSON of strings"))
        }
        Output::Table => {
            let mut out = String::new();
            for (i, t) in tables.iter().enumerate() {
                if tables.len() > 1 {
                    out.push_str(&format!("{}{}\n", if i > 0 { "\n" } else { "" }, t.name.to_uppercase()));
                }
                let widths: Vec<usize> = (0..t.headers.len())
                    .map(|c| t.rows.iter().map(|r| r[c].len()).chain([t.headers[c].len()]).max().unwrap_or(0))
                    .collect();
                let line = |cells: Vec<&str>| {
                    let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
                    format!("{}\n", padded.join("  ").trim_end())
                };
                out.push_str(&line(t.headers.clone()));
                for r in &t.rows {
                    out.push_str(&line(r.iter().map(String::as_str).collect()));
                }
            }
            out
        }
    }
}

/// A column's JSON name: `LOG END OFFSET` is `log_end_offset`.
fn key(header: &str) -> String {
    header.to_lowercase().replace([' ', '-'], "_")
}

/// Numbers as numbers, `-` as null, the rest as strings.
fn cell_value(cell: &str) -> Value {
    match cell {
        "-" => Value::Null,
        _ => cell.parse::<i64>().map_or_else(|_| Value::String(cell.to_string()), Value::from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_for_people_and_nest_for_scripts() {
        let mut t = Table::new("partitions", &["TOPIC", "PARTITION", "LEADER EPOCH"]);
        t.row(cells!["orders", 0, "-"]);
        t.row(cells!["a", 11, 3]);
        assert_eq!(
            render(std::slice::from_ref(&t), Output::Table),
            "TOPIC   PARTITION  LEADER EPOCH\norders  0          -\na       11         3\n"
        );
        let json: Value = serde_json::from_str(&render(&[t], Output::Json)).unwrap();
        assert_eq!(json["partitions"][1], serde_json::json!({"topic": "a", "partition": 11, "leader_epoch": 3}));
        assert_eq!(json["partitions"][0]["leader_epoch"], Value::Null);
    }
}
