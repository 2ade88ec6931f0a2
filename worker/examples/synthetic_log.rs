//! Writes a worker log (`worker-a.wal`) holding a given number of conditions,
//! through the worker's own journal code, for measuring replay (restart) time:
//! one snapshot with `--isus` published ISUs (UUIDs `0xxxxxxx-…`, owner
//! `bench`), then posts of 10 conditions each, spread over the ISUs.
//!
//! `cargo run --release -p worker --example synthetic_log -- DIR [CONDITIONS] [ISUS]`

use shared::domain::Flags;
use shared::protocol::ShardIsu;
use shared::wal::FsyncPolicy;
use worker::journal::Journal;
use worker::store::{NewCondition, Shard, Store};

const BATCH: usize = 10;
const MESSAGES: [&str; 4] = [
    "今日も元気に座られています",
    "少し汚れが気になります",
    "重さに耐えています",
    "",
];

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let directory = std::path::PathBuf::from(
        args.next()
            .ok_or_else(|| anyhow::anyhow!("usage: DIR [CONDITIONS] [ISUS]"))?,
    );
    let conditions: usize = args.next().map_or(Ok(1_000_000), |text| text.parse())?;
    let isus: usize = args.next().map_or(Ok(100), |text| text.parse())?;
    let _ = std::fs::remove_file(directory.join("worker-a.wal"));

    let store = Store::new(Shard::new(0));
    let (journal, _) = Journal::open(&directory, "a", FsyncPolicy::Never, u64::MAX, &store, None).await?;
    let generation = 0x5eed;
    let uuids: Vec<String> = (0..isus)
        .map(|isu| format!("0{isu:07x}-0000-4000-8000-000000000000"))
        .collect();
    let shard_isus: Vec<ShardIsu> = uuids
        .iter()
        .enumerate()
        .map(|(index, uuid)| ShardIsu {
            id: 1000 + index as i64,
            uuid: uuid.clone(),
            owner: "bench".into(),
            name: format!("bench {index}"),
            character: "すなお".into(),
            conditions: Vec::new(),
        })
        .collect();
    store.replace(Shard::from_reset(generation, &["bench".into()], &shard_isus));
    journal.reset().await?;

    let started = std::time::Instant::now();
    let batches = conditions.div_ceil(BATCH);
    for serial in 0..batches {
        let isu = serial % isus;
        let round = (serial / isus) as i64;
        let batch: Vec<NewCondition<'_>> = (0..BATCH)
            .map(|offset| NewCondition {
                timestamp: 1_628_348_400 + (round * BATCH as i64 + offset as i64) * 60,
                flags: Flags::new(offset % 2 == 0, (offset % 3) as u8 * Flags::DIRTY),
                message: MESSAGES[(serial + offset) % MESSAGES.len()],
            })
            .collect();
        journal.post(generation, &uuids[isu], &batch).await?;
    }
    let bytes = std::fs::metadata(directory.join("worker-a.wal"))?.len();
    println!(
        "wrote {} conditions in {batches} batches over {isus} ISUs: {:.1} MiB in {:.1} s",
        batches * BATCH,
        bytes as f64 / (1 << 20) as f64,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
