//! The router's view of a placement map: the versioned map file nginx routes per-ISU
//! requests by (`nginx/router.lua` reads it).
//!
//! The coordinator writes this text to the router's map file (`--router-map`) whenever the
//! map changes, then hands the same text to the running nginx through its control server
//! (`--router-url`): nginx takes it without a reload. A restarted nginx starts from the
//! file, which always holds the newest version. The format, line by line:
//!
//! - `version N`: the map's version; the router refuses a version older than its own of the
//!   same lineage;
//! - `lineage HEX`: the map's history (optional, default `0`, see
//!   [`PlacementMap::lineage`]): a map of another lineage replaces the router's whatever
//!   its version (a coordinator that started without its log begins a new history);
//! - `cell ID NAME`: each cell, ids from 0 in map order (the router has an upstream
//!   `cell_<name>` per configured cell, see [`upstream_name`], and refuses unknown ones);
//! - `slots D…`: the cell id of each slot (`00`..`ff`, the UUID's first two hex digits;
//!   anything else falls to slot 0's cell, like [`slot_of`]) in lowercase hex: 256 digits,
//!   one a slot, while the map has at most 16 cells, else 512, two a slot (the format of
//!   the first maps is kept for the maps it can say);
//! - `pin UUID NAME`: a pinned ISU and its cell (compared ignoring case).
//!
//! Lines starting with `#` are comments.
//!
//! [`slot_of`]: crate::placement_map::slot_of

use std::fmt::Write;

use crate::placement_map::{PlacementMap, SLOTS};

/// The nginx upstream name of a cell.
pub fn upstream_name(cell: &str) -> String {
    format!("cell_{}", cell.replace('-', "_"))
}

/// The router's map file for `map`, headed by `written_by` (a comment line).
pub fn map_text(map: &PlacementMap, written_by: &str) -> String {
    let mut out = String::with_capacity(512 + 64 * map.pins().len());
    let _ = writeln!(
        out,
        "# Placement map for the router, {written_by}. Do not edit: nginx takes each new\n# version from the coordinator and starts from this file."
    );
    let _ = writeln!(out, "version {}", map.version());
    let _ = writeln!(out, "lineage {:x}", map.lineage());
    for (id, cell) in map.cells().iter().enumerate() {
        let _ = writeln!(out, "cell {id} {}", cell.name);
    }
    out.push_str("slots ");
    let one_digit = map.cells().len() <= 16;
    for cell in map.slots() {
        let _ = if one_digit {
            write!(out, "{cell:x}")
        } else {
            write!(out, "{cell:02x}")
        };
    }
    out.push('\n');
    for (uuid, cell) in map.pins() {
        // Pins are UUIDs the coordinator accepted; nothing that could end the line.
        if uuid.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-') {
            let _ = writeln!(out, "pin {uuid} {}", map.cells()[usize::from(*cell)].name);
        }
    }
    out
}

/// The `slots` line's digits: one a slot (256) or two a slot (512), lowercase hex.
fn parse_slots(text: &str) -> Option<Vec<u8>> {
    let width = match text.len() {
        SLOTS => 1,
        length if length == 2 * SLOTS => 2,
        _ => return None,
    };
    let digit = |byte: u8| match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    };
    text.as_bytes()
        .chunks(width)
        .map(|digits| digits.iter().try_fold(0u8, |id, byte| Some(id * 16 + digit(*byte)?)))
        .collect()
}

/// A map text read back: what the router routes by (the same checks as `nginx/router.lua`,
/// but for the configured cells, which only nginx knows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterMap {
    pub version: u64,
    /// Lowercase hex, `0` when the text has no lineage line.
    pub lineage: String,
    /// Cell names, by id.
    pub cells: Vec<String>,
    /// The cell id of each slot.
    pub slots: Vec<u8>,
    /// Pinned UUIDs (lowercase) and their cell names.
    pub pins: Vec<(String, String)>,
}

impl RouterMap {
    /// Parses a map text; the reason (with its line) when the router would refuse it.
    pub fn parse(text: &str) -> Result<RouterMap, String> {
        if text.contains('\r') {
            return Err("carriage return in the map: lines end with LF only".to_owned());
        }
        let (mut version, mut slots, mut lineage) = (None, None, None);
        let (mut cells, mut pins) = (Vec::new(), Vec::new());
        let is_name = |name: &str| {
            !name.is_empty()
                && name.len() <= 32
                && name
                    .bytes()
                    .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
        };
        for (number, line) in text.lines().enumerate().map(|(index, line)| (index + 1, line)) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |what: &str| format!("line {number}: {what}");
            let (key, rest) = line.split_once(' ').ok_or_else(|| bad("unknown line"))?;
            match key {
                "version" if version.is_none() => {
                    let parsed = rest.parse::<u64>().ok().filter(|value| *value >= 1 && rest.len() <= 15);
                    version = Some(parsed.ok_or_else(|| bad("bad version"))?);
                }
                "lineage" if lineage.is_none() => {
                    let valid = !rest.is_empty()
                        && rest.len() <= 16
                        && rest
                            .bytes()
                            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte));
                    if !valid {
                        return Err(bad("bad lineage (want: up to 16 lowercase hex digits)"));
                    }
                    lineage = Some(rest.to_owned());
                }
                "cell" => match rest.split_once(' ') {
                    Some((id, name)) if id.parse() == Ok(cells.len()) && is_name(name) => cells.push(name.to_owned()),
                    _ => return Err(bad("bad cell (want: cell ID NAME, ids from 0 in order)")),
                },
                "slots" if slots.is_none() => {
                    slots = Some(
                        parse_slots(rest)
                            .ok_or_else(|| bad("slots wants 256 lowercase hex digits (512 past 16 cells)"))?,
                    );
                }
                "pin" => match rest.split_once(' ') {
                    Some((uuid, name))
                        if !uuid.is_empty()
                            && uuid.len() <= 64
                            && uuid.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
                            && is_name(name) =>
                    {
                        pins.push((uuid.to_ascii_lowercase(), name.to_owned()))
                    }
                    _ => return Err(bad("bad pin (want: pin UUID CELL)")),
                },
                _ => return Err(bad("unknown line")),
            }
        }
        let version = version.ok_or("no version")?;
        if cells.is_empty() {
            return Err("no cell".to_owned());
        }
        let slots = slots.ok_or("no slots")?;
        if let Some((slot, id)) = slots
            .iter()
            .enumerate()
            .find(|(_, id)| usize::from(**id) >= cells.len())
        {
            return Err(format!(
                "slot {slot:02x} names cell id {id}: the map has {} cells",
                cells.len()
            ));
        }
        if let Some((uuid, name)) = pins.iter().find(|(_, name)| !cells.contains(name)) {
            return Err(format!("pin {uuid} names cell {name}, which the map does not have"));
        }
        Ok(RouterMap {
            version,
            lineage: lineage.unwrap_or_else(|| "0".to_owned()),
            cells,
            slots,
            pins,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement_map::{Cell, MAX_CELLS, SLOTS};

    fn cells(count: usize) -> Vec<Cell> {
        (0..count)
            .map(|index| Cell {
                name: format!("c-{index}"),
                internal_url: format!("http://127.0.0.{}:3000/", index + 3),
                device_url: String::new(),
            })
            .collect()
    }

    #[test]
    fn the_map_text_names_every_cell_slot_and_pin() {
        let mut map = PlacementMap::new(cells(2)).unwrap();
        map.pin("0b104b95-3532-4828-8550-89da717b9667", 1).unwrap();
        map.assign_slot(0x1f, 0).unwrap();
        let text = map_text(&map, "written by a test");
        assert!(text.starts_with("# Placement map for the router, written by a test."));
        assert!(text.contains(&format!("\nversion {}\n", map.version())));
        assert!(text.contains("\ncell 0 c-0\ncell 1 c-1\n"), "{text}");
        let slots = text.lines().find_map(|line| line.strip_prefix("slots ")).unwrap();
        assert_eq!(slots.len(), SLOTS);
        for (slot, digit) in slots.chars().enumerate() {
            let owner = map.slots()[slot];
            assert_eq!(digit.to_digit(16), Some(u32::from(owner)), "slot {slot:02x}");
        }
        assert_eq!(&slots[0x1e..0x20], "10", "1e is cell 1's, 1f moved to cell 0");
        assert!(
            text.ends_with("\npin 0b104b95-3532-4828-8550-89da717b9667 c-1\n"),
            "{text}"
        );
        let read = RouterMap::parse(&text).unwrap();
        assert_eq!(read.version, map.version());
        assert_eq!(read.lineage, "0");
        assert_eq!(read.cells, ["c-0", "c-1"]);
        assert_eq!(read.slots, map.slots());
        assert_eq!(
            read.pins,
            [("0b104b95-3532-4828-8550-89da717b9667".to_owned(), "c-1".to_owned())]
        );
        let mut renewed = map.clone();
        renewed.new_lineage();
        let read = RouterMap::parse(&map_text(&renewed, "x")).unwrap();
        assert_eq!(read.lineage, format!("{:x}", renewed.lineage()));
        assert_ne!(read.lineage, "0");
    }

    #[test]
    fn a_map_the_router_would_refuse_is_refused_with_its_reason() {
        let good = map_text(&PlacementMap::new(cells(3)).unwrap(), "x");
        assert!(RouterMap::parse(&good).is_ok());
        let slots_line = good.lines().find(|line| line.starts_with("slots ")).unwrap();
        let cases = [
            ("hello".to_owned(), "line 1: unknown line"),
            (good.replace("version 1", "version 0"), "bad version"),
            (good.replace("version 1\n", ""), "no version"),
            (good.replace("cell 1 c-1", "cell 2 c-1"), "bad cell"),
            (good.replace("cell 1 c-1", "cell 1 C"), "bad cell"),
            (good.replace(slots_line, &slots_line[..200]), "256 lowercase hex digits"),
            (
                good.replace(slots_line, &slots_line.replacen('0', "3", 1)),
                "slot 00 names cell id 3",
            ),
            (format!("{good}pin abc c-9\n"), "which the map does not have"),
            (format!("{good}pin a;b c-1\n"), "bad pin"),
            (good.replace("lineage 0", "lineage XYZ"), "bad lineage"),
            (good.replace('\n', "\r\n"), "carriage return"),
        ];
        for (text, reason) in cases {
            let error = RouterMap::parse(&text).unwrap_err();
            assert!(error.contains(reason), "{reason}: {error}");
        }
    }

    #[test]
    fn sixteen_cells_fit_one_hex_digit_per_slot() {
        let map = PlacementMap::new(cells(16)).unwrap();
        let text = map_text(&map, "x");
        let slots = text.lines().find_map(|line| line.strip_prefix("slots ")).unwrap();
        assert_eq!(slots.len(), SLOTS);
        assert!(slots.contains('f'));
        assert_eq!(upstream_name("c-15"), "cell_c_15");
    }

    #[test]
    fn more_than_sixteen_cells_take_two_hex_digits_per_slot() {
        let mut map = PlacementMap::new(cells(MAX_CELLS)).unwrap();
        map.assign_slot(0xff, 63).unwrap();
        let text = map_text(&map, "x");
        let slots = text.lines().find_map(|line| line.strip_prefix("slots ")).unwrap();
        assert_eq!(slots.len(), 2 * SLOTS);
        assert_eq!(&slots[..4], "0000");
        assert!(slots.ends_with("3f"), "{slots}");
        let read = RouterMap::parse(&text).unwrap();
        assert_eq!(read.slots, map.slots());
        assert_eq!(read.cells.len(), MAX_CELLS);
        let odd = text.replace(slots, &slots[..511]);
        assert!(RouterMap::parse(&odd).unwrap_err().contains("512 past 16 cells"));
        let beyond = text.replace(slots, &format!("40{}", &slots[2..]));
        assert!(RouterMap::parse(&beyond)
            .unwrap_err()
            .contains("slot 00 names cell id 64"));
    }
}
