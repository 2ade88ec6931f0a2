//! What the consensus tests share: an application that records the commands it applies.

use consensus::state_machine::Applier;
use parking_lot::Mutex;

/// The commands applied, in order; its reply is how many it has applied.
#[derive(Default)]
pub struct Recorder {
    pub applied: Mutex<Vec<Vec<u8>>>,
}

impl Applier for Recorder {
    fn apply(&self, _index: u64, command: &[u8]) -> Vec<u8> {
        let mut applied = self.applied.lock();
        applied.push(command.to_vec());
        (applied.len() as u64).to_le_bytes().to_vec()
    }

    fn snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(&*self.applied.lock()).unwrap()
    }

    fn restore(&self, snapshot: &[u8]) -> Result<(), String> {
        *self.applied.lock() = if snapshot.is_empty() {
            Vec::new()
        } else {
            serde_json::from_slice(snapshot).map_err(|error| error.to_string())?
        };
        Ok(())
    }
}
