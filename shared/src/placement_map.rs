//! The placement map of the cell-based cluster: which cell (worker) owns an ISU.
//!
//! `slot(uuid)` is the UUID's first two hex digits (JIA's UUIDs are random, so the 256
//! slots are even); every slot is assigned to a cell, and a pin table (one ISU → a cell)
//! overrides its slot. The owner is therefore explicit and auditable, and a router can find
//! it with a prefix lookup (nginx needs no hashing). Adding a cell moves only the slots one
//! chooses to move, like Redis Cluster's hash slots with the UUID prefix as the hash.
//!
//! Every change bumps `version`; the coordinator logs a map before it publishes it. The
//! default map of two cells is exactly [`crate::placement::shard_of`]: a slot belongs to the
//! parity of its first hex digit. This module is pure (no I/O): the coordinator applies
//! plans from it, and `shared/tests/properties.rs` checks its invariants.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Number of slots: all values of a UUID's first two hex digits.
pub const SLOTS: usize = 256;
/// Most cells a map may name: the most the scale test runs (`scripts/bench --scale
/// --scale-cells 64`); a cell id is one byte, and the router's map file writes it in two
/// hex digits past 16 cells.
pub const MAX_CELLS: usize = 64;

/// Index of a cell in [`PlacementMap::cells`].
pub type CellId = u8;

/// A cell: a worker, named in configuration, with its internal and device base URLs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cell {
    pub name: String,
    pub internal_url: String,
    pub device_url: String,
}

/// Why a map or a change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("a map needs 1 to {MAX_CELLS} cells, not {0}")]
    CellCount(usize),
    #[error("two cells are named {0:?}")]
    DuplicateName(String),
    #[error("no cell {0}")]
    UnknownCell(CellId),
    #[error("a cell name must be 1 to 32 characters of a-z, 0-9 and '-': {0:?}")]
    BadName(String),
    #[error("cannot drain the only cell")]
    LastCell,
    #[error("a map has {SLOTS} slots, not {0}")]
    SlotCount(usize),
}

/// The slot of a UUID: its first two hex digits. A UUID whose first character is not a hex
/// digit (never registered with JIA) is slot 0; one whose second is not, slot `first * 16`,
/// so the default two-cell map agrees with [`crate::placement::shard_of`] on every string.
pub fn slot_of(uuid: &str) -> u8 {
    let digit = |index: usize| uuid.as_bytes().get(index).and_then(|byte| (*byte as char).to_digit(16));
    match digit(0) {
        None => 0,
        Some(first) => (first * 16 + digit(1).unwrap_or(0)) as u8,
    }
}

/// One slot changing owner in a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotMove {
    pub slot: u8,
    pub from: CellId,
    pub to: CellId,
}

/// The versioned map: cells, the owner of each slot, and pins. A map read from the wire is
/// checked like a built one (256 slots, every slot and pin naming a cell that exists).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WireMap")]
pub struct PlacementMap {
    version: u64,
    /// The map's history: versions are comparable only within one lineage. 0 for a map
    /// made by [`PlacementMap::new`] (the renderer's default); a coordinator that starts
    /// without a logged map draws a new one ([`PlacementMap::new_lineage`]), so the router
    /// takes its version 1 over any version of an older history.
    #[serde(default)]
    lineage: u64,
    cells: Vec<Cell>,
    /// Always exactly [`SLOTS`] entries, each a valid cell.
    slots: Vec<CellId>,
    pins: BTreeMap<String, CellId>,
}

/// A map as received, before its checks.
#[derive(Deserialize)]
struct WireMap {
    version: u64,
    #[serde(default)]
    lineage: u64,
    cells: Vec<Cell>,
    slots: Vec<CellId>,
    pins: BTreeMap<String, CellId>,
}

impl TryFrom<WireMap> for PlacementMap {
    type Error = PlacementError;

    fn try_from(wire: WireMap) -> Result<PlacementMap, PlacementError> {
        let mut map = PlacementMap::new(wire.cells)?;
        if wire.slots.len() != SLOTS {
            return Err(PlacementError::SlotCount(wire.slots.len()));
        }
        for cell in wire.slots.iter().chain(wire.pins.values()) {
            map.check_cell(*cell)?;
        }
        map.version = wire.version;
        map.lineage = wire.lineage;
        map.slots = wire.slots;
        map.pins = wire.pins;
        Ok(map)
    }
}

impl PlacementMap {
    /// Version 1 over `cells`. Up to 16 cells, slots are spread by first hex digit: slot `s`
    /// belongs to cell `(s >> 4) % cells.len()` (for two cells, the parity of the first hex
    /// digit). Past 16, in even runs: slot `s` belongs to cell `s * cells.len() / 256`.
    pub fn new(cells: Vec<Cell>) -> Result<PlacementMap, PlacementError> {
        if cells.is_empty() || cells.len() > MAX_CELLS {
            return Err(PlacementError::CellCount(cells.len()));
        }
        for (index, cell) in cells.iter().enumerate() {
            check_name(&cell.name)?;
            if cells[..index].iter().any(|other| other.name == cell.name) {
                return Err(PlacementError::DuplicateName(cell.name.clone()));
            }
        }
        let count = cells.len();
        Ok(PlacementMap {
            version: 1,
            lineage: 0,
            cells,
            slots: (0..SLOTS)
                .map(|slot| if count <= 16 { (slot >> 4) % count } else { slot * count / SLOTS } as CellId)
                .collect(),
            pins: BTreeMap::new(),
        })
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    /// See the field's documentation.
    pub fn lineage(&self) -> u64 {
        self.lineage
    }

    /// Starts a new history: a random non-zero lineage.
    pub fn new_lineage(&mut self) {
        self.lineage = rand::random::<u64>().max(1);
    }

    pub fn cells(&self) -> &[Cell] {
        &self.cells
    }

    pub fn cell(&self, id: CellId) -> Option<&Cell> {
        self.cells.get(usize::from(id))
    }

    /// The cell named `name`.
    pub fn cell_id(&self, name: &str) -> Option<CellId> {
        self.cells
            .iter()
            .position(|cell| cell.name == name)
            .map(|index| index as CellId)
    }

    /// The owner of every slot, slot by slot.
    pub fn slots(&self) -> &[CellId] {
        &self.slots
    }

    pub fn pins(&self) -> &BTreeMap<String, CellId> {
        &self.pins
    }

    /// The cell that owns `uuid` at this version: its pin, else its slot's cell.
    pub fn owner(&self, uuid: &str) -> CellId {
        match self.pins.get(uuid) {
            Some(cell) => *cell,
            None => self.slots[usize::from(slot_of(uuid))],
        }
    }

    /// How many slots each cell holds.
    pub fn slot_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.cells.len()];
        for cell in &self.slots {
            counts[usize::from(*cell)] += 1;
        }
        counts
    }

    /// Adds a cell that owns nothing yet (a rebalance gives it slots); returns its id.
    pub fn add_cell(&mut self, cell: Cell) -> Result<CellId, PlacementError> {
        if self.cells.len() == MAX_CELLS {
            return Err(PlacementError::CellCount(MAX_CELLS + 1));
        }
        check_name(&cell.name)?;
        if self.cell_id(&cell.name).is_some() {
            return Err(PlacementError::DuplicateName(cell.name));
        }
        self.cells.push(cell);
        self.version += 1;
        Ok((self.cells.len() - 1) as CellId)
    }

    /// Points cell `id` at new addresses (a restarted coordinator configured with other
    /// URLs for a cell its log names); true (and a new version) when that changed anything.
    pub fn set_endpoints(&mut self, id: CellId, internal_url: &str, device_url: &str) -> Result<bool, PlacementError> {
        self.check_cell(id)?;
        let cell = &mut self.cells[usize::from(id)];
        if cell.internal_url == internal_url && cell.device_url == device_url {
            return Ok(false);
        }
        cell.internal_url = internal_url.to_owned();
        cell.device_url = device_url.to_owned();
        self.version += 1;
        Ok(true)
    }

    /// Gives `slot` to `cell`; true (and a new version) when that changed anything.
    pub fn assign_slot(&mut self, slot: u8, cell: CellId) -> Result<bool, PlacementError> {
        self.check_cell(cell)?;
        let current = &mut self.slots[usize::from(slot)];
        if *current == cell {
            return Ok(false);
        }
        *current = cell;
        self.version += 1;
        Ok(true)
    }

    /// Pins `uuid` to `cell` (over its slot); true (and a new version) when that changed anything.
    pub fn pin(&mut self, uuid: &str, cell: CellId) -> Result<bool, PlacementError> {
        self.check_cell(cell)?;
        if self.pins.get(uuid) == Some(&cell) {
            return Ok(false);
        }
        self.pins.insert(uuid.to_owned(), cell);
        self.version += 1;
        Ok(true)
    }

    /// Removes the pin of `uuid` (it follows its slot again); true when there was one.
    pub fn unpin(&mut self, uuid: &str) -> bool {
        let removed = self.pins.remove(uuid).is_some();
        if removed {
            self.version += 1;
        }
        removed
    }

    /// The fewest slot moves that leave every cell of `active` holding ⌊256/n⌋ or ⌈256/n⌉
    /// slots and the others none: the cells holding the most keep the larger shares, and
    /// only slots above a cell's share move, to the cells below theirs (lowest slots of an
    /// over-full cell stay). Empty when the map is already balanced.
    pub fn rebalance_plan(&self, active: &[CellId]) -> Result<Vec<SlotMove>, PlacementError> {
        let mut active: Vec<CellId> = active.to_vec();
        active.sort_unstable();
        active.dedup();
        if active.is_empty() {
            return Err(PlacementError::LastCell);
        }
        for cell in &active {
            self.check_cell(*cell)?;
        }
        let counts = self.slot_counts();
        let targets = balanced_targets(&counts, &active);
        // Slots leave over-full cells (their highest slots first) ...
        let mut leaving: Vec<(u8, CellId)> = Vec::new();
        for (cell, count) in counts.iter().enumerate() {
            let excess = count.saturating_sub(targets[cell]);
            let owned = (0..SLOTS).rev().filter(|slot| usize::from(self.slots[*slot]) == cell);
            leaving.extend(owned.take(excess).map(|slot| (slot as u8, cell as CellId)));
        }
        leaving.sort_unstable();
        // ... and fill the under-full ones, lowest cell id first.
        let mut room: Vec<(CellId, usize)> = active
            .iter()
            .map(|cell| {
                (
                    *cell,
                    targets[usize::from(*cell)].saturating_sub(counts[usize::from(*cell)]),
                )
            })
            .filter(|(_, room)| *room > 0)
            .collect();
        let mut moves = Vec::with_capacity(leaving.len());
        for (slot, from) in leaving {
            let Some(entry) = room.iter_mut().find(|(_, room)| *room > 0) else {
                break;
            };
            entry.1 -= 1;
            moves.push(SlotMove {
                slot,
                from,
                to: entry.0,
            });
        }
        Ok(moves)
    }

    /// The plan that empties `cell`: a rebalance over every other cell. Its pins are moved
    /// by [`PlacementMap::pins_of`] and [`PlacementMap::pin`].
    pub fn drain_plan(&self, cell: CellId) -> Result<Vec<SlotMove>, PlacementError> {
        self.check_cell(cell)?;
        let others: Vec<CellId> = (0..self.cells.len() as CellId).filter(|other| *other != cell).collect();
        if others.is_empty() {
            return Err(PlacementError::LastCell);
        }
        self.rebalance_plan(&others)
    }

    /// The ISUs pinned to `cell`.
    pub fn pins_of(&self, cell: CellId) -> Vec<&str> {
        self.pins
            .iter()
            .filter(|(_, owner)| **owner == cell)
            .map(|(uuid, _)| uuid.as_str())
            .collect()
    }

    /// Applies a plan move by move (each a new version, as a live migration flips them).
    pub fn apply(&mut self, plan: &[SlotMove]) -> Result<(), PlacementError> {
        for step in plan {
            self.assign_slot(step.slot, step.to)?;
        }
        Ok(())
    }

    fn check_cell(&self, cell: CellId) -> Result<(), PlacementError> {
        if usize::from(cell) < self.cells.len() {
            Ok(())
        } else {
            Err(PlacementError::UnknownCell(cell))
        }
    }
}

/// Each cell's share of the 256 slots: ⌊256/n⌋ for every active cell, plus one for the
/// `256 mod n` active cells that hold the most now (ties: lower id), 0 for the inactive.
fn balanced_targets(counts: &[usize], active: &[CellId]) -> Vec<usize> {
    let base = SLOTS / active.len();
    let extra = SLOTS % active.len();
    let mut by_load: Vec<CellId> = active.to_vec();
    by_load.sort_by_key(|cell| (std::cmp::Reverse(counts[usize::from(*cell)]), *cell));
    let mut targets = vec![0; counts.len()];
    for (rank, cell) in by_load.iter().enumerate() {
        targets[usize::from(*cell)] = base + usize::from(rank < extra);
    }
    targets
}

/// The node name of cell `name`'s worker in logs and metrics (`worker-a`).
pub fn worker_role(name: &str) -> String {
    format!("worker-{name}")
}

/// Checks a cell name: 1 to 32 characters of `a-z`, `0-9` and `-` (it names a log file, an
/// nginx upstream and a metrics label).
pub fn check_name(name: &str) -> Result<(), PlacementError> {
    let valid = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-');
    if valid {
        Ok(())
    } else {
        Err(PlacementError::BadName(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::{shard_of, Shard};

    pub(crate) fn cells(count: usize) -> Vec<Cell> {
        (0..count)
            .map(|index| Cell {
                name: format!("cell-{index}"),
                internal_url: format!("http://127.0.0.{}:3000", index + 3),
                device_url: format!("http://127.0.0.{}:8080", index + 3),
            })
            .collect()
    }

    #[test]
    fn slots_are_the_first_two_hex_digits() {
        assert_eq!(slot_of("0b104b95-3532-4828-8550-89da717b9667"), 0x0b);
        assert_eq!(slot_of("FF000000-0000-4000-8000-000000000000"), 0xff);
        assert_eq!(slot_of("a"), 0xa0);
        assert_eq!(slot_of("7z"), 0x70);
        assert_eq!(slot_of(""), 0);
        assert_eq!(slot_of("zz"), 0);
    }

    #[test]
    fn the_default_two_cell_map_is_the_parity_rule() {
        let map = PlacementMap::new(cells(2)).unwrap();
        for uuid in ["0b10", "1b10", "8", "9x", "a", "B", "f0", "E", "", "-", "zz"] {
            let expected = match shard_of(uuid) {
                Shard::A => 0,
                Shard::B => 1,
            };
            assert_eq!(map.owner(uuid), expected, "{uuid:?}");
        }
        assert_eq!(map.slot_counts(), [128, 128]);
        assert_eq!(map.rebalance_plan(&[0, 1]).unwrap(), []);
    }

    #[test]
    fn pins_override_slots_and_every_change_is_a_new_version() {
        let mut map = PlacementMap::new(cells(3)).unwrap();
        let uuid = "0b104b95-3532-4828-8550-89da717b9667";
        assert_eq!((map.owner(uuid), map.version()), (0, 1));
        assert!(map.pin(uuid, 2).unwrap());
        assert!(!map.pin(uuid, 2).unwrap(), "the same pin again changes nothing");
        assert_eq!((map.owner(uuid), map.version()), (2, 2));
        assert!(map.assign_slot(0x0b, 1).unwrap());
        assert_eq!(map.owner(uuid), 2, "the pin wins over its slot");
        assert!(map.unpin(uuid));
        assert_eq!((map.owner(uuid), map.version()), (1, 4));
        assert_eq!(map.pin(uuid, 3), Err(PlacementError::UnknownCell(3)));
        assert_eq!(map.version(), 4, "a refused change is no new version");
    }

    #[test]
    fn cells_are_validated() {
        assert_eq!(PlacementMap::new(Vec::new()), Err(PlacementError::CellCount(0)));
        assert_eq!(PlacementMap::new(cells(65)), Err(PlacementError::CellCount(65)));
        let mut twins = cells(2);
        twins[1].name = twins[0].name.clone();
        assert_eq!(
            PlacementMap::new(twins),
            Err(PlacementError::DuplicateName("cell-0".into()))
        );
        let mut bad = cells(1);
        bad[0].name = "Cell A".into();
        assert!(matches!(PlacementMap::new(bad), Err(PlacementError::BadName(_))));
        let mut map = PlacementMap::new(cells(MAX_CELLS)).unwrap();
        assert_eq!(
            map.add_cell(cells(65).pop().unwrap()),
            Err(PlacementError::CellCount(65))
        );
    }

    #[test]
    fn past_sixteen_cells_every_cell_gets_an_even_run_of_slots() {
        for count in [17, 40, MAX_CELLS] {
            let map = PlacementMap::new(cells(count)).unwrap();
            let counts = map.slot_counts();
            assert_eq!(counts.len(), count);
            assert!(
                counts
                    .iter()
                    .all(|slots| (SLOTS / count..=SLOTS / count + 1).contains(slots)),
                "{counts:?}"
            );
            assert!(
                map.slots().windows(2).all(|pair| pair[0] <= pair[1]),
                "runs in slot order"
            );
        }
        let sixteen = PlacementMap::new(cells(16)).unwrap();
        assert!(sixteen
            .slots()
            .iter()
            .enumerate()
            .all(|(slot, cell)| usize::from(*cell) == slot >> 4));
    }

    #[test]
    fn adding_a_third_cell_and_rebalancing_moves_a_third_of_the_slots() {
        let mut map = PlacementMap::new(cells(2)).unwrap();
        let new = map.add_cell(cells(3).pop().unwrap()).unwrap();
        let plan = map.rebalance_plan(&[0, 1, new]).unwrap();
        assert_eq!(plan.len(), 85, "256 / 3 slots, rounded down, come to the new cell");
        assert!(plan.iter().all(|step| step.to == new && step.from != new));
        map.apply(&plan).unwrap();
        let mut counts = map.slot_counts();
        counts.sort_unstable();
        assert_eq!(counts, [85, 85, 86]);
        assert_eq!(map.rebalance_plan(&[0, 1, new]).unwrap(), []);
    }

    #[test]
    fn a_map_from_the_wire_is_checked() {
        let map = PlacementMap::new(cells(2)).unwrap();
        let mut wire = serde_json::to_value(&map).unwrap();
        assert_eq!(serde_json::from_value::<PlacementMap>(wire.clone()).unwrap(), map);
        wire["slots"][7] = serde_json::json!(2);
        let error = serde_json::from_value::<PlacementMap>(wire.clone()).unwrap_err();
        assert!(error.to_string().contains("no cell 2"), "{error}");
        wire["slots"] = serde_json::json!(vec![0; 255]);
        let error = serde_json::from_value::<PlacementMap>(wire).unwrap_err();
        assert!(error.to_string().contains("not 255"), "{error}");
    }

    #[test]
    fn draining_a_cell_moves_exactly_its_slots() {
        let map = PlacementMap::new(cells(4)).unwrap();
        let plan = map.drain_plan(1).unwrap();
        assert_eq!(plan.len(), 64);
        assert!(plan.iter().all(|step| step.from == 1 && step.to != 1));
        assert_eq!(
            PlacementMap::new(cells(1)).unwrap().drain_plan(0),
            Err(PlacementError::LastCell)
        );
    }
}
