//! Importer for the official MariaDB `mysqldump` of the ISUCONDITION database (`1_InitData.sql`).
//!
//! Only what such a dump needs is understood: comments (`-- `, `#`, `/* */`, which also
//! covers the `/*!40101 ... */` version comments), statements skipped whole (`LOCK`,
//! `UNLOCK`, `SET`, `DROP`, `CREATE`, ...) and
//! `INSERT [IGNORE] INTO `table` [(columns)] VALUES (...),(...);`.
//! Values are `NULL`, numbers, quoted strings with mysqldump's backslash escapes,
//! `_binary '...'` strings and `0x...` hex literals (`--hex-blob`).
//! Everything is bytes: the `image` column is a LONGBLOB inside a quoted string.

use std::collections::{HashMap, HashSet};

use anyhow::{anyhow, bail, Context};

use super::{wire_condition, Dataset, DatasetIsu};
use crate::protocol::WireCondition;

/// The reference stores `isu_condition.timestamp` as a JST wall-clock `DATETIME`.
const JST_OFFSET_SECONDS: i64 = 9 * 3600;

/// Column order of `INSERT` statements without a column list (`0_Schema.sql`).
const USER_COLUMNS: &[&str] = &["jia_user_id", "created_at"];
const ISU_COLUMNS: &[&str] = &[
    "id",
    "jia_isu_uuid",
    "name",
    "image",
    "character",
    "jia_user_id",
    "created_at",
    "updated_at",
];
const CONDITION_COLUMNS: &[&str] = &[
    "id",
    "jia_isu_uuid",
    "timestamp",
    "is_sitting",
    "condition",
    "message",
    "created_at",
];

/// Parses a dump and builds the dataset: users in dump order, ISUs in id order,
/// each ISU's conditions sorted by timestamp.
pub fn import(dump: &[u8]) -> anyhow::Result<Dataset> {
    let mut users = Vec::new();
    let mut isus = Vec::new();
    let mut conditions = Vec::new();
    let mut row_counts: HashMap<String, usize> = HashMap::new();

    for statement in parse_inserts(dump)? {
        let (schema_columns, table_kind) = match statement.table.as_str() {
            "user" => (USER_COLUMNS, TableKind::User),
            "isu" => (ISU_COLUMNS, TableKind::Isu),
            "isu_condition" => (CONDITION_COLUMNS, TableKind::Condition),
            _ => continue,
        };
        let columns: Vec<String> = match statement.columns {
            Some(columns) => columns,
            None => schema_columns.iter().map(|name| (*name).to_owned()).collect(),
        };
        for values in statement.rows {
            let ordinal = row_counts.entry(statement.table.clone()).or_default();
            *ordinal += 1;
            let mut row = Row::new(&statement.table, *ordinal, &columns, values)?;
            match table_kind {
                TableKind::User => users.push(row.user()?),
                TableKind::Isu => isus.push(row.isu()?),
                TableKind::Condition => conditions.push(row.condition()?),
            }
        }
    }

    assemble(users, isus, conditions)
}

enum TableKind {
    User,
    Isu,
    Condition,
}

/// Checks uniqueness, orders ISUs by id and attaches each condition to its ISU.
fn assemble(
    users: Vec<String>,
    mut isus: Vec<DatasetIsu>,
    conditions: Vec<(String, WireCondition)>,
) -> anyhow::Result<Dataset> {
    let mut seen_users = HashSet::new();
    for user in &users {
        if !seen_users.insert(user.as_str()) {
            bail!("duplicate user {user:?} in the dump");
        }
    }

    isus.sort_by_key(|isu| isu.id);
    let mut index_by_uuid = HashMap::new();
    for (index, isu) in isus.iter().enumerate() {
        if index > 0 && isus[index - 1].id == isu.id {
            bail!("duplicate isu id {} in the dump", isu.id);
        }
        if index_by_uuid.insert(isu.uuid.clone(), index).is_some() {
            bail!("duplicate isu jia_isu_uuid {:?} in the dump", isu.uuid);
        }
    }

    for (uuid, condition) in conditions {
        let Some(&index) = index_by_uuid.get(&uuid) else {
            bail!(
                "isu_condition at timestamp {} refers to jia_isu_uuid {uuid:?}, which has no isu row",
                condition.timestamp
            );
        };
        isus[index].conditions.push(condition);
    }
    for isu in &mut isus {
        // Stable: conditions sharing a timestamp keep their dump (id) order.
        isu.conditions.sort_by_key(|condition| condition.timestamp);
    }

    Ok(Dataset { users, isus })
}

/// One row of a known table, with its values addressable by column name.
struct Row<'c> {
    /// `table row N (id X)`, for error messages.
    label: String,
    columns: &'c [String],
    values: Vec<SqlValue>,
}

impl<'c> Row<'c> {
    fn new(table: &str, ordinal: usize, columns: &'c [String], values: Vec<SqlValue>) -> anyhow::Result<Row<'c>> {
        let mut label = format!("`{table}` row {ordinal}");
        let key_column = if table == "user" { "jia_user_id" } else { "id" };
        if let Some(position) = columns.iter().position(|column| column == key_column) {
            match values.get(position) {
                Some(SqlValue::Number(number)) => label.push_str(&format!(" ({key_column} {number})")),
                Some(SqlValue::Bytes(bytes)) => {
                    label.push_str(&format!(" ({key_column} {:?})", String::from_utf8_lossy(bytes)))
                }
                _ => {}
            }
        }
        if values.len() != columns.len() {
            bail!("{label}: {} values for {} columns", values.len(), columns.len());
        }
        Ok(Row { label, columns, values })
    }

    /// Moves a column's value out of the row (each column is read once).
    fn take(&mut self, column: &str) -> anyhow::Result<SqlValue> {
        let position = self
            .columns
            .iter()
            .position(|name| name == column)
            .ok_or_else(|| anyhow!("{}: no column `{column}`", self.label))?;
        Ok(std::mem::replace(&mut self.values[position], SqlValue::Null))
    }

    /// Like [`Row::take`], but a column missing from the statement's column list is
    /// `NULL`, the schema's default for the nullable columns this is used for.
    fn take_nullable(&mut self, column: &str) -> SqlValue {
        match self.columns.iter().position(|name| name == column) {
            Some(position) => std::mem::replace(&mut self.values[position], SqlValue::Null),
            None => SqlValue::Null,
        }
    }

    fn integer(&mut self, column: &str) -> anyhow::Result<i64> {
        match self.take(column)? {
            SqlValue::Number(text) => text
                .parse()
                .map_err(|_| anyhow!("{}: column `{column}` is not an integer: {text}", self.label)),
            other => bail!(
                "{}: column `{column}` must be an integer, found {}",
                self.label,
                other.kind()
            ),
        }
    }

    fn bytes_or_null(&mut self, column: &str) -> anyhow::Result<Option<Vec<u8>>> {
        match self.take_nullable(column) {
            SqlValue::Null => Ok(None),
            SqlValue::Bytes(bytes) => Ok(Some(bytes)),
            SqlValue::Number(_) => bail!("{}: column `{column}` must be a string", self.label),
        }
    }

    fn text_or_null(&mut self, column: &str) -> anyhow::Result<Option<String>> {
        let Some(bytes) = self.bytes_or_null(column)? else {
            return Ok(None);
        };
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| anyhow!("{}: column `{column}` is not valid UTF-8", self.label))
    }

    fn text(&mut self, column: &str) -> anyhow::Result<String> {
        let value = self.take(column)?;
        let label = &self.label;
        let value = match value {
            SqlValue::Bytes(bytes) => bytes,
            other => bail!("{label}: column `{column}` must be a string, found {}", other.kind()),
        };
        String::from_utf8(value).map_err(|_| anyhow!("{label}: column `{column}` is not valid UTF-8"))
    }

    fn user(&mut self) -> anyhow::Result<String> {
        self.text("jia_user_id")
    }

    fn isu(&mut self) -> anyhow::Result<DatasetIsu> {
        Ok(DatasetIsu {
            id: self.integer("id")?,
            uuid: self.text("jia_isu_uuid")?,
            name: self.text("name")?,
            character: self.text_or_null("character")?.unwrap_or_default(),
            owner: self.text("jia_user_id")?,
            image: self.bytes_or_null("image")?,
            conditions: Vec::new(),
        })
    }

    /// The condition and the UUID of the ISU it belongs to.
    fn condition(&mut self) -> anyhow::Result<(String, WireCondition)> {
        let uuid = self.text("jia_isu_uuid")?;
        let datetime = self.text("timestamp")?;
        let timestamp = parse_jst_datetime(&datetime)
            .ok_or_else(|| anyhow!("{}: `timestamp` is not a DATETIME: {datetime:?}", self.label))?;
        let is_sitting = match self.integer("is_sitting")? {
            0 => false,
            1 => true,
            other => bail!("{}: `is_sitting` must be 0 or 1, found {other}", self.label),
        };
        let condition = self.text("condition")?;
        let message = self.text("message")?;
        let wire = wire_condition(timestamp, is_sitting, &condition, &message)
            .ok_or_else(|| anyhow!("{}: invalid condition string {condition:?}", self.label))?;
        Ok((uuid, wire))
    }
}

/// Converts a JST wall-clock `YYYY-MM-DD HH:MM:SS[.ffffff]` to Unix seconds
/// (a fraction is truncated). `None` for anything else, including invalid dates.
pub fn parse_jst_datetime(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() < 19 {
        return None;
    }
    let (main, fraction) = bytes.split_at(19);
    let fraction_is_valid = fraction.is_empty()
        || (fraction.len() >= 2
            && fraction.len() <= 7
            && fraction[0] == b'.'
            && fraction[1..].iter().all(u8::is_ascii_digit));
    if !fraction_is_valid {
        return None;
    }
    for (position, separator) in [(4, b'-'), (7, b'-'), (10, b' '), (13, b':'), (16, b':')] {
        if main[position] != separator {
            return None;
        }
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = &main[range];
        if !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(
            digits
                .iter()
                .fold(0, |value, digit| value * 10 + i64::from(digit - b'0')),
        )
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if year == 0 || !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(days * 86_400 + hour * 3600 + minute * 60 + second - JST_OFFSET_SECONDS)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// A literal in a `VALUES` tuple.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SqlValue {
    Null,
    /// The literal's text, e.g. `-12` or `1.5`.
    Number(String),
    /// A quoted string or hex literal, escapes decoded.
    Bytes(Vec<u8>),
}

impl SqlValue {
    fn kind(&self) -> &'static str {
        match self {
            SqlValue::Null => "NULL",
            SqlValue::Number(_) => "a number",
            SqlValue::Bytes(_) => "a string",
        }
    }
}

/// One `INSERT` statement.
#[derive(Debug)]
struct Insert {
    table: String,
    /// The explicit column list, if the statement has one.
    columns: Option<Vec<String>>,
    rows: Vec<Vec<SqlValue>>,
}

/// Every `INSERT` of the dump, in order; every other statement is skipped.
fn parse_inserts(dump: &[u8]) -> anyhow::Result<Vec<Insert>> {
    let mut scanner = Scanner {
        input: dump,
        position: 0,
    };
    let mut inserts = Vec::new();
    loop {
        scanner.skip_blanks()?;
        if scanner.peek().is_none() {
            return Ok(inserts);
        }
        let start = scanner.position;
        if scanner.at_keyword("INSERT") {
            let insert = scanner
                .insert()
                .with_context(|| format!("in the INSERT statement at line {}", scanner.line_of(start)))?;
            inserts.push(insert);
        } else {
            scanner
                .skip_statement()
                .with_context(|| format!("in the statement at line {}", scanner.line_of(start)))?;
        }
    }
}

struct Scanner<'a> {
    input: &'a [u8],
    position: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.input.get(self.position).copied()
    }

    fn line_of(&self, position: usize) -> usize {
        1 + self.input[..position.min(self.input.len())]
            .iter()
            .filter(|byte| **byte == b'\n')
            .count()
    }

    /// An error at the current position.
    fn error(&self, what: &str) -> anyhow::Error {
        match self.peek() {
            Some(byte) => anyhow!(
                "{what} at line {}, byte offset {} (found {:?})",
                self.line_of(self.position),
                self.position,
                char::from(byte)
            ),
            None => anyhow!("{what} at the end of the dump"),
        }
    }

    /// Skips whitespace and comments, including `/*! ... */` version comments.
    fn skip_blanks(&mut self) -> anyhow::Result<()> {
        loop {
            let input = self.input;
            let rest = &input[self.position..];
            match rest {
                [byte, ..] if byte.is_ascii_whitespace() => self.position += 1,
                [b'-', b'-', after, ..] if after.is_ascii_whitespace() || after.is_ascii_control() => self.skip_line(),
                [b'-', b'-'] | [b'#', ..] => self.skip_line(),
                [b'/', b'*', ..] => {
                    let end = find(&rest[2..], b"*/").ok_or_else(|| self.error("unterminated /* comment"))?;
                    self.position += 2 + end + 2;
                }
                _ => return Ok(()),
            }
        }
    }

    fn skip_line(&mut self) {
        match find(&self.input[self.position..], b"\n") {
            Some(end) => self.position += end + 1,
            None => self.position = self.input.len(),
        }
    }

    /// Whether a case-insensitive keyword starts here (not as the prefix of a longer word).
    fn at_keyword(&self, keyword: &str) -> bool {
        let rest = &self.input[self.position..];
        rest.len() >= keyword.len()
            && rest[..keyword.len()].eq_ignore_ascii_case(keyword.as_bytes())
            && !rest.get(keyword.len()).is_some_and(|byte| is_word_byte(*byte))
    }

    fn keyword(&mut self, keyword: &str) -> anyhow::Result<()> {
        self.skip_blanks()?;
        if !self.at_keyword(keyword) {
            return Err(self.error(&format!("expected {keyword}")));
        }
        self.position += keyword.len();
        Ok(())
    }

    fn optional_keyword(&mut self, keyword: &str) -> anyhow::Result<bool> {
        self.skip_blanks()?;
        if self.at_keyword(keyword) {
            self.position += keyword.len();
            return Ok(true);
        }
        Ok(false)
    }

    fn punctuation(&mut self, expected: u8) -> anyhow::Result<()> {
        self.skip_blanks()?;
        if self.peek() != Some(expected) {
            return Err(self.error(&format!("expected '{}'", char::from(expected))));
        }
        self.position += 1;
        Ok(())
    }

    /// Skips to just after the `;` ending the statement, stepping over quoted text and comments.
    fn skip_statement(&mut self) -> anyhow::Result<()> {
        loop {
            self.skip_blanks()?;
            match self.peek() {
                None => return Err(self.error("statement without a terminating ';'")),
                Some(b';') => {
                    self.position += 1;
                    return Ok(());
                }
                Some(quote @ (b'\'' | b'"' | b'`')) => {
                    self.quoted(quote)?;
                }
                Some(_) => self.position += 1,
            }
        }
    }

    /// `INSERT [IGNORE] INTO table [(columns)] VALUES (...),(...);`
    fn insert(&mut self) -> anyhow::Result<Insert> {
        self.keyword("INSERT")?;
        self.optional_keyword("IGNORE")?;
        self.keyword("INTO")?;
        let table = self.identifier()?;
        self.skip_blanks()?;
        let columns = if self.peek() == Some(b'(') {
            self.position += 1;
            let mut columns = vec![self.identifier()?];
            while self.list_continues(b')')? {
                columns.push(self.identifier()?);
            }
            Some(columns)
        } else {
            None
        };
        if !self.optional_keyword("VALUES")? {
            self.keyword("VALUE")?;
        }
        let mut rows = vec![self.tuple()?];
        loop {
            self.skip_blanks()?;
            match self.peek() {
                Some(b',') => {
                    self.position += 1;
                    rows.push(self.tuple()?);
                }
                Some(b';') => {
                    self.position += 1;
                    return Ok(Insert { table, columns, rows });
                }
                _ => return Err(self.error("expected ',' or ';' after a row")),
            }
        }
    }

    /// After a list element: `true` on `,`, `false` on the closing byte.
    fn list_continues(&mut self, close: u8) -> anyhow::Result<bool> {
        self.skip_blanks()?;
        match self.peek() {
            Some(b',') => {
                self.position += 1;
                Ok(true)
            }
            Some(byte) if byte == close => {
                self.position += 1;
                Ok(false)
            }
            _ => Err(self.error(&format!("expected ',' or '{}'", char::from(close)))),
        }
    }

    /// A `backquoted` or bare identifier.
    fn identifier(&mut self) -> anyhow::Result<String> {
        self.skip_blanks()?;
        let bytes = if self.peek() == Some(b'`') {
            self.quoted(b'`')?
        } else {
            let start = self.position;
            while self.peek().is_some_and(is_word_byte) {
                self.position += 1;
            }
            if start == self.position {
                return Err(self.error("expected an identifier"));
            }
            self.input[start..self.position].to_vec()
        };
        String::from_utf8(bytes).map_err(|_| self.error("identifier is not valid UTF-8"))
    }

    /// `(value, value, ...)`
    fn tuple(&mut self) -> anyhow::Result<Vec<SqlValue>> {
        self.punctuation(b'(')?;
        let mut values = vec![self.value()?];
        while self.list_continues(b')')? {
            values.push(self.value()?);
        }
        Ok(values)
    }

    fn value(&mut self) -> anyhow::Result<SqlValue> {
        self.skip_blanks()?;
        if self.optional_keyword("NULL")? {
            return Ok(SqlValue::Null);
        }
        // MySQL 8's mysqldump writes blobs as `_binary '...'`.
        if self.optional_keyword("_binary")? {
            self.skip_blanks()?;
        }
        let input = self.input;
        match &input[self.position..] {
            [quote @ (b'\'' | b'"'), ..] => Ok(SqlValue::Bytes(self.quoted(*quote)?)),
            [b'0', b'x' | b'X', ..] => self.hex_literal(),
            [byte, ..] if byte.is_ascii_digit() || matches!(*byte, b'-' | b'+' | b'.') => {
                let start = self.position;
                self.position += 1;
                while self
                    .peek()
                    .is_some_and(|byte| byte.is_ascii_digit() || matches!(byte, b'.' | b'e' | b'E' | b'-' | b'+'))
                {
                    self.position += 1;
                }
                let text = std::str::from_utf8(&self.input[start..self.position]).unwrap_or_default();
                if !text.bytes().any(|byte| byte.is_ascii_digit()) {
                    self.position = start;
                    return Err(self.error("expected a value"));
                }
                Ok(SqlValue::Number(text.to_owned()))
            }
            _ => Err(self.error("expected a value")),
        }
    }

    /// `0x4142...` → the bytes it spells.
    fn hex_literal(&mut self) -> anyhow::Result<SqlValue> {
        self.position += 2;
        let start = self.position;
        while self.peek().is_some_and(|byte| byte.is_ascii_hexdigit()) {
            self.position += 1;
        }
        let digits = &self.input[start..self.position];
        if digits.is_empty() || self.peek().is_some_and(is_word_byte) {
            return Err(self.error("malformed hex literal"));
        }
        // MySQL pads an odd number of digits on the left.
        let padded: Vec<u8> = if digits.len() % 2 == 1 {
            std::iter::once(b'0').chain(digits.iter().copied()).collect()
        } else {
            digits.to_vec()
        };
        let nibble = |digit: u8| (digit as char).to_digit(16).unwrap_or(0) as u8;
        Ok(SqlValue::Bytes(
            padded
                .chunks(2)
                .map(|pair| (nibble(pair[0]) << 4) | nibble(pair[1]))
                .collect(),
        ))
    }

    /// A string quoted with `quote`, decoding backslash escapes and doubled quotes.
    /// Backquoted identifiers take no backslash escapes.
    fn quoted(&mut self, quote: u8) -> anyhow::Result<Vec<u8>> {
        let start = self.position;
        self.position += 1;
        let mut decoded = Vec::new();
        loop {
            let Some(byte) = self.peek() else {
                self.position = start;
                return Err(self.error("unterminated quoted string"));
            };
            self.position += 1;
            if byte == quote {
                if self.peek() == Some(quote) {
                    decoded.push(quote);
                    self.position += 1;
                    continue;
                }
                return Ok(decoded);
            }
            if byte != b'\\' || quote == b'`' {
                decoded.push(byte);
                continue;
            }
            let Some(escaped) = self.peek() else {
                self.position = start;
                return Err(self.error("unterminated quoted string"));
            };
            self.position += 1;
            match escaped {
                b'0' => decoded.push(0),
                b'b' => decoded.push(0x08),
                b'n' => decoded.push(b'\n'),
                b'r' => decoded.push(b'\r'),
                b't' => decoded.push(b'\t'),
                b'Z' => decoded.push(0x1a),
                // Outside LIKE patterns MySQL keeps these two with their backslash.
                b'%' | b'_' => decoded.extend_from_slice(&[b'\\', escaped]),
                // `\\`, `\'`, `\"` and any other byte stand for themselves.
                other => decoded.push(other),
            }
        }
    }
}

fn is_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'$' || byte >= 0x80
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Level;

    const HEADER: &str = "-- MySQL dump 10.19  Distrib 10.3.29-MariaDB\n--\n\
        /*!40101 SET NAMES utf8mb4 */;\n/*!40103 SET TIME_ZONE='+00:00' */;\n\
        LOCK TABLES `isu` WRITE;\n/*!40000 ALTER TABLE `isu` DISABLE KEYS */;\n";

    fn dump(body: &str) -> Vec<u8> {
        format!("{HEADER}{body}\nUNLOCK TABLES;\n-- Dump completed\n").into_bytes()
    }

    fn error_of(dump: &[u8]) -> String {
        format!("{:#}", import(dump).expect_err("the dump must be rejected"))
    }

    #[test]
    fn jst_datetimes_convert_to_unix_seconds() {
        assert_eq!(parse_jst_datetime("1970-01-01 09:00:00"), Some(0));
        assert_eq!(parse_jst_datetime("2021-08-08 00:00:00"), Some(1_628_348_400));
        assert_eq!(parse_jst_datetime("2021-06-03 15:59:09"), Some(1_622_703_549));
        assert_eq!(parse_jst_datetime("2020-02-29 09:00:00"), Some(1_582_934_400));
        assert_eq!(parse_jst_datetime("1969-12-31 09:00:00"), Some(-86_400));
        assert_eq!(parse_jst_datetime("2021-08-02 19:17:31.000000"), Some(1_627_899_451));
        for bad in [
            "",
            "2021-08-08",
            "2021-08-08T00:00:00",
            "2021-13-01 00:00:00",
            "2021-02-29 00:00:00",
            "2021-04-31 00:00:00",
            "2021-01-01 24:00:00",
            "2021-01-01 00:60:00",
            "0000-00-00 00:00:00",
            "2021-01-01 00:00:00.",
            "2021-01-01 00:00:00x",
            "2021-1-01 00:00:000",
            "２０２１-01-01 00:00:00",
        ] {
            assert_eq!(parse_jst_datetime(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn imports_users_isus_and_conditions_from_multi_row_inserts() {
        let dataset = import(&dump(
            "INSERT INTO `isu` VALUES (2,'u-2','椅子二号',NULL,NULL,'bob','2021-01-01 00:00:00.000000','2021-01-01 00:00:00.000000'),\
             (1,'u-1','Chair (one); \"quoted\"','\\0\\'\\\"\\b\\n\\r\\t\\Z\\\\\\x\\%\\_','すなお','alice',NULL,NULL);\n\
             INSERT INTO `isu_association_config` VALUES ('jia_service_url','http://localhost:5000');\n\
             INSERT INTO `isu_condition` VALUES \
             (1,'u-1','2021-08-08 00:00:01',1,'is_dirty=true,is_overweight=true,is_broken=true','late','x'),\
             (2,'u-1','2021-08-08 00:00:00',0,'is_dirty=false,is_overweight=false,is_broken=false','','x'),\
             (3,'u-2','2021-08-08 00:00:00',0,'is_dirty=false,is_overweight=true,is_broken=false','it''s heavy',NULL);\n\
             INSERT INTO `user` VALUES ('bob','2021-01-01 00:00:00.000000'),('alice','2021-01-01 00:00:00.000000');",
        ))
        .unwrap();

        assert_eq!(dataset.users, ["bob", "alice"]);
        assert_eq!(dataset.isus.iter().map(|isu| isu.id).collect::<Vec<_>>(), [1, 2]);

        let first = &dataset.isus[0];
        assert_eq!(first.uuid, "u-1");
        assert_eq!(first.name, "Chair (one); \"quoted\"");
        assert_eq!(first.character, "すなお");
        assert_eq!(first.owner, "alice");
        assert_eq!(first.image.as_deref(), Some(&b"\0'\"\x08\n\r\t\x1a\\x\\%\\_"[..]));
        let timestamps: Vec<i64> = first.conditions.iter().map(|condition| condition.timestamp).collect();
        assert_eq!(timestamps, [1_628_348_400, 1_628_348_401]);
        assert_eq!(first.conditions[0].message, "");
        assert!(!first.conditions[0].flags.is_sitting());
        assert_eq!(first.conditions[0].flags.level(), Level::Info);
        assert!(first.conditions[1].flags.is_sitting());
        assert_eq!(first.conditions[1].flags.level(), Level::Critical);

        let second = &dataset.isus[1];
        assert_eq!(second.name, "椅子二号");
        assert_eq!(second.image, None);
        assert_eq!(second.character, "");
        assert_eq!(second.conditions.len(), 1);
        assert_eq!(second.conditions[0].message, "it's heavy");
        assert!(second.conditions[0].flags.is_overweight());
    }

    #[test]
    fn images_keep_every_byte_including_invalid_utf8() {
        let mut body = b"INSERT INTO `isu` VALUES (1,'u','n','\xff\xd8\xff\\0\x80\\\\',NULL,'o',NULL,NULL);".to_vec();
        body.extend_from_slice(b"\nINSERT INTO `user` VALUES ('o',NULL);");
        let mut bytes = HEADER.as_bytes().to_vec();
        bytes.extend_from_slice(&body);
        let dataset = import(&bytes).unwrap();
        assert_eq!(dataset.isus[0].image.as_deref(), Some(&b"\xff\xd8\xff\0\x80\\"[..]));
    }

    #[test]
    fn column_lists_hex_blobs_and_binary_strings_are_understood() {
        let dataset = import(
            b"INSERT INTO `isu` (`jia_user_id`, `id`, `jia_isu_uuid`, `name`, `image`) VALUES ('o', 7, 'u7', 'n', 0xFFD8ff),\
              ('o', 8, 'u8', 'n', _binary 'ab');\n\
              insert into user (jia_user_id) values ('o');",
        )
        .unwrap();
        assert_eq!(dataset.isus[0].image.as_deref(), Some(&[0xff, 0xd8, 0xff][..]));
        assert_eq!(dataset.isus[0].character, "");
        assert_eq!(dataset.isus[1].image.as_deref(), Some(&b"ab"[..]));
        assert_eq!(dataset.users, ["o"]);
    }

    #[test]
    fn an_empty_dump_is_an_empty_dataset() {
        assert_eq!(import(b"").unwrap(), Dataset::default());
        assert_eq!(import(&dump("")).unwrap(), Dataset::default());
    }

    #[test]
    fn invalid_condition_strings_name_the_row() {
        let message = error_of(&dump(
            "INSERT INTO `isu` VALUES (1,'u','n',NULL,NULL,'o',NULL,NULL);\n\
             INSERT INTO `isu_condition` VALUES (1,'u','2021-08-08 00:00:00',1,'is_dirty=false,is_overweight=false,is_broken=false','ok',NULL),\
             (42,'u','2021-08-08 01:00:00',1,'is_dirty=true,is_overweight=false,is_brokan=false','bad',NULL);",
        ));
        assert!(message.contains("`isu_condition` row 2 (id 42)"), "{message}");
        assert!(message.contains("is_brokan"), "{message}");
    }

    #[test]
    fn malformed_dumps_are_errors_not_panics() {
        let isu = "INSERT INTO `isu` VALUES (1,'u','n',NULL,NULL,'o',NULL,NULL);\n";
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (dump("INSERT INTO `user` VALUES ('a',NULL)"), "expected ',' or ';'"),
            (dump("INSERT INTO `user` VALUES ('a,NULL);"), "unterminated quoted string"),
            (dump("INSERT INTO `user` VALUES ('a' NULL);"), "expected ',' or ')'"),
            (dump("INSERT INTO `user` VALUES ('a',NULL,3);"), "3 values for 2 columns"),
            (dump("INSERT INTO `user` VALUES (NULL,NULL);"), "must be a string, found NULL"),
            (dump("INSERT INTO `user` VALUES ('a',NULL),('a',NULL);"), "duplicate user"),
            (dump("INSERT INTO `user` VALUES ('a',NOW());"), "expected a value"),
            (dump("INSERT INTO `user` VALUES"), "expected '('"),
            (dump("INSERT `user` VALUES ('a',NULL);"), "expected INTO"),
            (dump("INSERT INTO `isu` VALUES ('one','u','n',NULL,NULL,'o',NULL,NULL);"), "must be an integer"),
            (dump("INSERT INTO `isu` VALUES (1.5,'u','n',NULL,NULL,'o',NULL,NULL);"), "not an integer"),
            (dump("INSERT INTO `isu` VALUES (1,'u','n',0xZZ,NULL,'o',NULL,NULL);"), "malformed hex literal"),
            (dump("INSERT INTO `isu` VALUES (1,'u','n',NULL,NULL,'o',NULL,NULL),(1,'v','n',NULL,NULL,'o',NULL,NULL);"), "duplicate isu id 1"),
            (dump("INSERT INTO `isu` VALUES (1,'u','n',NULL,NULL,'o',NULL,NULL),(2,'u','n',NULL,NULL,'o',NULL,NULL);"), "duplicate isu jia_isu_uuid"),
            (dump(&format!("{isu}INSERT INTO `isu_condition` VALUES (1,'x','2021-08-08 00:00:00',1,'is_dirty=false,is_overweight=false,is_broken=false','',NULL);")), "no isu row"),
            (dump(&format!("{isu}INSERT INTO `isu_condition` VALUES (1,'u','2021-08-08',1,'is_dirty=false,is_overweight=false,is_broken=false','',NULL);")), "not a DATETIME"),
            (dump(&format!("{isu}INSERT INTO `isu_condition` VALUES (1,'u','2021-08-08 00:00:00',2,'is_dirty=false,is_overweight=false,is_broken=false','',NULL);")), "must be 0 or 1"),
            (dump(&format!("{isu}INSERT INTO `isu_condition` VALUES (1,'u','2021-08-08 00:00:00',1,'is_dirty=false,is_overweight=false,is_broken=false',3,NULL);")), "must be a string"),
            (dump(&format!("{isu}INSERT INTO `isu_condition` (`id`) VALUES (1);")), "no column `jia_isu_uuid`"),
            (b"INSERT INTO `isu` VALUES (1,'u','\xff',NULL,NULL,'o',NULL,NULL);".to_vec(), "not valid UTF-8"),
            (dump("/* never closed"), "unterminated /* comment"),
            (dump("SET @a = 'x"), "unterminated quoted string"),
            (b"LOCK TABLES `isu` WRITE".to_vec(), "without a terminating ';'"),
            (b"INSERT INTO `user` VALUES ('a\\".to_vec(), "unterminated quoted string"),
            (b"INSERT INTO".to_vec(), "expected an identifier"),
        ];
        for (bytes, expected) in cases {
            let message = error_of(&bytes);
            assert!(
                message.contains(expected),
                "{:?}: expected {expected:?} in {message:?}",
                String::from_utf8_lossy(&bytes)
            );
        }
    }

    #[test]
    fn errors_point_at_the_line_of_the_statement() {
        let message = error_of(&dump("INSERT INTO `user` VALUES ('a',NULL),\n('b' 'c');"));
        assert!(message.contains("INSERT statement at line 7"), "{message}");
        assert!(message.contains("at line 8"), "{message}");
    }

    #[test]
    fn truncated_input_never_panics() {
        let full = dump(
            "INSERT INTO `isu` VALUES (1,'u','n','\\0\\'x',NULL,'o',NULL,NULL);\n\
             INSERT INTO `isu_condition` VALUES (1,'u','2021-08-08 00:00:00',1,'is_dirty=false,is_overweight=false,is_broken=false','m',NULL);\n\
             INSERT INTO `user` VALUES ('o',NULL);",
        );
        assert!(import(&full).is_ok());
        for length in 0..full.len() {
            let _ = import(&full[..length]);
        }
    }
}
