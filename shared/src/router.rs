//! The router's view of a placement map: the nginx include that routes per-ISU requests.
//!
//! nginx loads it with `include` (the public server and the device servers use
//! `$isu_cell`), and is reloaded gracefully when the coordinator rewrites it. The file
//! holds everything that depends on the map and nothing else:
//!
//! - one `upstream cell_<name>` per cell (its internal address);
//! - `$isu_slot_cell`: the upstream of each of the 256 slots (the UUID's first two hex
//!   digits, lowercase; anything else falls to slot 0's cell, like [`slot_of`]);
//! - `$isu_cell`: the pinned ISUs' upstreams, every other UUID its slot's.
//!
//! `$isu_slot` and `$isu_uuid` come from the main configuration (the path of the request).
//! nginx compares map strings ignoring case, so an uppercase UUID finds its slot as well.

use std::fmt::Write;

use crate::placement_map::{Cell, PlacementMap};

/// The nginx upstream name of a cell.
pub fn upstream_name(cell: &Cell) -> String {
    format!("cell_{}", cell.name.replace('-', "_"))
}

/// `host:port` of a base URL (`http://127.0.0.3:3000/` → `127.0.0.3:3000`).
pub fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest)
}

/// The include file for `map` (see the module documentation).
pub fn nginx_include(map: &PlacementMap) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let _ = writeln!(
        out,
        "# Placement map version {} ({} cells, {} pins), written by the coordinator.\n# Do not edit: it is rewritten whenever the map changes.",
        map.version(),
        map.cells().len(),
        map.pins().len()
    );
    for cell in map.cells() {
        let _ = writeln!(
            out,
            "upstream {} {{\n    server {};\n    keepalive 256;\n    keepalive_requests 100000;\n    keepalive_timeout 60s;\n}}",
            upstream_name(cell),
            authority(&cell.internal_url)
        );
    }
    let name_of = |id: u8| upstream_name(&map.cells()[usize::from(id)]);
    let _ = writeln!(
        out,
        "map $isu_slot $isu_slot_cell {{\n    default {};",
        name_of(map.slots()[0])
    );
    for (slot, cell) in map.slots().iter().enumerate() {
        let _ = writeln!(out, "    {slot:02x} {};", name_of(*cell));
    }
    out.push_str("}\n");
    out.push_str("map $isu_uuid $isu_cell {\n    default $isu_slot_cell;\n");
    for (uuid, cell) in map.pins() {
        // Pins are UUIDs the coordinator accepted; quoted, and nothing that could end the string.
        if uuid.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-') {
            let _ = writeln!(out, "    \"{uuid}\" {};", name_of(*cell));
        }
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_include_names_every_slot_and_pin() {
        let mut map = PlacementMap::new(cells(2)).unwrap();
        map.pin("0b104b95-3532-4828-8550-89da717b9667", 1).unwrap();
        let text = nginx_include(&map);
        assert!(
            text.contains("upstream cell_c_0 {\n    server 127.0.0.3:3000;"),
            "{text}"
        );
        assert!(
            text.contains("upstream cell_c_1 {\n    server 127.0.0.4:3000;"),
            "{text}"
        );
        assert!(text.contains("    00 cell_c_0;\n"));
        assert!(text.contains("    1f cell_c_1;\n"));
        assert!(text.contains("    ff cell_c_1;\n"));
        assert_eq!(
            text.matches(" cell_c_").count(),
            2 + 1 + 256 + 1,
            "upstreams, default, slots, pin"
        );
        assert!(text.contains("    \"0b104b95-3532-4828-8550-89da717b9667\" cell_c_1;\n"));
        assert!(text.contains("version 2"));
    }

    #[test]
    fn authority_strips_scheme_and_path() {
        assert_eq!(authority("http://127.0.0.3:3000/"), "127.0.0.3:3000");
        assert_eq!(authority("https://w.example:8443/x"), "w.example:8443");
        assert_eq!(authority("127.0.0.3:3000"), "127.0.0.3:3000");
    }
}
