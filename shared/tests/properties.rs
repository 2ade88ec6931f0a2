//! Property tests of the parsers that take outside input: the condition string, device
//! condition batches, the MySQL dump importer and the inter-node protocol messages (plus
//! the session cookie and the cluster-secret check that guard them). Each property runs
//! a bounded number of cases, so the whole file takes a few seconds.

use proptest::collection::vec;
use proptest::prelude::*;
use shared::dataset::mysql::{import, parse_jst_datetime};
use shared::dataset::{Dataset, DatasetIsu};
use shared::domain::{parse_condition, Flags, Level};
use shared::ingest::{decode_batch, validate_batch, BatchError, MAX_CONDITIONS_PER_BATCH, MAX_MESSAGE_CHARS};
use shared::protocol::{
    carries_secret, Health, LatestBatch, ProvisionalIsu, PublishIsu, ResetShard, RollbackIsu, ShardIsu, UserSync,
    WireCondition,
};
use shared::session::SessionKey;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The eight valid condition strings, in flag order.
fn valid_condition_strings() -> Vec<&'static str> {
    (0..8u8).map(|bits| Flags(bits << 1).condition_string()).collect()
}

/// Strings near the condition grammar: pieces of it glued together, plus noise.
fn condition_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("is_dirty=".to_owned()),
        Just("is_overweight=".to_owned()),
        Just("is_broken=".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just(",".to_owned()),
        Just("=".to_owned()),
        Just("True".to_owned()),
        "[a-z_=,: ]{0,3}".prop_map(|text| text),
        any::<char>().prop_map(String::from),
    ];
    vec(piece, 0..12).prop_map(|pieces| pieces.concat())
}

/// A message as devices could send it: any characters, escapes included, within the limit.
fn message() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,40}".prop_map(|text| text),
        vec(any::<char>(), 0..MAX_MESSAGE_CHARS).prop_map(|chars| chars.into_iter().collect()),
        Just(String::new()),
        Just("\"\\\u{0}\n\u{1F600}椅子".to_owned()),
    ]
}

/// One posted element, as the device would encode it, and the flags it stands for.
fn posted_condition() -> impl Strategy<Value = (serde_json::Value, Flags, String)> {
    (any::<bool>(), 0..8u8, message(), any::<i64>()).prop_map(|(sitting, bits, message, timestamp)| {
        let flags = Flags::new(sitting, bits << 1);
        let json = serde_json::json!({
            "is_sitting": sitting,
            "condition": flags.condition_string(),
            "message": message,
            "timestamp": timestamp,
        });
        (json, flags, message)
    })
}

// ------------------------------------------------------------------ condition strings

proptest! {
    #![proptest_config(config(1_000))]

    #[test]
    fn a_condition_string_parses_iff_it_is_one_of_the_eight(text in condition_like()) {
        let valid = valid_condition_strings();
        match parse_condition(&text) {
            Some(bits) => {
                prop_assert!(valid.contains(&text.as_str()), "{text:?} accepted");
                prop_assert_eq!(Flags::new(false, bits).condition_string(), text.as_str());
            }
            None => prop_assert!(!valid.contains(&text.as_str()), "{text:?} refused"),
        }
    }

    #[test]
    fn one_edit_of_a_valid_string_is_refused_unless_it_is_valid_again(
        bits in 0..8u8,
        position in any::<prop::sample::Index>(),
        replacement in any::<char>(),
        edit in 0..3u8,
    ) {
        let original = Flags(bits << 1).condition_string();
        let mut chars: Vec<char> = original.chars().collect();
        let at = position.index(chars.len());
        match edit {
            0 => chars[at] = replacement,
            1 => chars.insert(at, replacement),
            _ => { chars.remove(at); }
        }
        let edited: String = chars.into_iter().collect();
        let is_valid = valid_condition_strings().contains(&edited.as_str());
        prop_assert_eq!(parse_condition(&edited).is_some(), is_valid, "{:?}", edited);
    }

    #[test]
    fn the_level_counts_the_true_values_of_the_string(sitting in any::<bool>(), bits in 0..8u8) {
        let flags = Flags::new(sitting, bits << 1);
        let text = flags.condition_string();
        prop_assert_eq!(parse_condition(text), Some(bits << 1));
        let expected = match text.matches("=true").count() {
            0 => Level::Info,
            3 => Level::Critical,
            _ => Level::Warning,
        };
        prop_assert_eq!(flags.level(), expected);
        prop_assert_eq!(flags.is_sitting(), sitting);
    }
}

// ------------------------------------------------------------------ condition batches

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn arbitrary_bytes_never_panic_the_batch_parser(mut body in vec(any::<u8>(), 0..512)) {
        if let Ok(posted) = decode_batch(&mut body) {
            prop_assert!(!posted.is_empty() && posted.len() <= MAX_CONDITIONS_PER_BATCH);
            let _ = validate_batch(&posted);
        }
    }

    #[test]
    fn json_shaped_noise_never_panics_the_batch_parser(
        pieces in vec(prop_oneof![
            Just("["), Just("]"), Just("{"), Just("}"), Just(","), Just(":"), Just("\"is_sitting\""),
            Just("\"condition\""), Just("\"message\""), Just("\"timestamp\""), Just("true"), Just("1e400"),
            Just("-9223372036854775809"), Just("\"\\u0000\\ud800\""), Just("\"is_dirty=true,is_overweight=true,is_broken=true\""),
            Just("null"), Just(" "),
        ], 0..64),
    ) {
        let mut body = pieces.concat().into_bytes();
        if let Ok(posted) = decode_batch(&mut body) {
            let _ = validate_batch(&posted);
        }
    }

    #[test]
    fn valid_batches_round_trip_every_field(items in vec(posted_condition(), 1..40)) {
        let json: Vec<&serde_json::Value> = items.iter().map(|(json, _, _)| json).collect();
        let mut body = serde_json::to_vec(&json).unwrap();
        let posted = decode_batch(&mut body).unwrap();
        let valid = validate_batch(&posted).unwrap();
        prop_assert_eq!(valid.len(), items.len());
        for (got, (json, flags, message)) in valid.iter().zip(&items) {
            prop_assert_eq!(got.flags, *flags);
            prop_assert_eq!(got.message, message.as_str());
            prop_assert_eq!(got.timestamp, json["timestamp"].as_i64().unwrap());
        }
    }

    #[test]
    fn one_bad_element_refuses_the_whole_batch(
        items in vec(posted_condition(), 1..20),
        position in any::<prop::sample::Index>(),
        bad in condition_like(),
        too_long in any::<bool>(),
    ) {
        let mut json: Vec<serde_json::Value> = items.into_iter().map(|(json, _, _)| json).collect();
        let at = position.index(json.len());
        let expected = if too_long {
            json[at]["message"] = serde_json::json!("m".repeat(MAX_MESSAGE_CHARS + 1));
            BatchError::MessageTooLong
        } else {
            prop_assume!(parse_condition(&bad).is_none());
            json[at]["condition"] = serde_json::json!(bad);
            BatchError::InvalidCondition
        };
        let mut body = serde_json::to_vec(&json).unwrap();
        let posted = decode_batch(&mut body).unwrap();
        prop_assert_eq!(validate_batch(&posted).unwrap_err(), expected);
    }
}

// ------------------------------------------------------------------ the MySQL dump importer

/// `YYYY-MM-DD HH:MM:SS` of a Unix time in JST (Howard Hinnant's `civil_from_days`).
fn jst_datetime(unix: i64) -> String {
    let local = unix + 9 * 3600;
    let (days, seconds) = (local.div_euclid(86_400), local.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        seconds / 3600,
        seconds % 3600 / 60,
        seconds % 60
    )
}

/// A string literal as mysqldump writes it.
fn quoted(bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![b'\''];
    for &byte in bytes {
        match byte {
            0 => out.extend_from_slice(b"\\0"),
            b'\'' => out.extend_from_slice(b"\\'"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0x1a => out.extend_from_slice(b"\\Z"),
            other => out.push(other),
        }
    }
    out.push(b'\'');
    out
}

/// How an image is written: `--hex-blob`, a quoted string or MySQL 8's `_binary '...'`.
fn blob(bytes: &[u8], style: u8) -> Vec<u8> {
    match style {
        0 if !bytes.is_empty() => format!("0x{}", hex::encode_upper(bytes)).into_bytes(),
        1 => [b"_binary ".as_slice(), &quoted(bytes)].concat(),
        _ => quoted(bytes),
    }
}

/// A dump of `dataset` in the shape of the official `1_InitData.sql` (comments, skipped
/// statements, rows split over several INSERTs), ISUs and each ISU's conditions in reverse
/// order, images in the blob `style` 0 (hex), 1 (`_binary`) or 2 (quoted).
fn render_dump(dataset: &Dataset, style: u8) -> Vec<u8> {
    let mut dump = b"-- MySQL dump 10.19\n/*!40101 SET NAMES utf8mb4 */;\nDROP TABLE IF EXISTS `isu`;\n\
        CREATE TABLE `isu` (\n  `id` bigint AUTO_INCREMENT, -- comment; with a semicolon\n  PRIMARY KEY (`id`)\n);\n\
        LOCK TABLES `isu` WRITE;\n"
        .to_vec();
    for (index, isu) in dataset.isus.iter().enumerate().rev() {
        dump.extend_from_slice(if index % 2 == 0 {
            b"INSERT INTO `isu` VALUES ("
        } else {
            b"INSERT IGNORE INTO isu VALUES\n("
        });
        dump.extend_from_slice(format!("{},", isu.id).as_bytes());
        for text in [&isu.uuid, &isu.name] {
            dump.extend_from_slice(&quoted(text.as_bytes()));
            dump.push(b',');
        }
        match &isu.image {
            Some(image) => dump.extend_from_slice(&blob(image, style)),
            None => dump.extend_from_slice(b"NULL"),
        }
        dump.push(b',');
        if isu.character.is_empty() {
            dump.extend_from_slice(b"NULL");
        } else {
            dump.extend_from_slice(&quoted(isu.character.as_bytes()));
        }
        dump.push(b',');
        dump.extend_from_slice(&quoted(isu.owner.as_bytes()));
        dump.extend_from_slice(b",'2021-08-01 00:00:00.000000',NULL);\n");
    }
    dump.extend_from_slice(b"UNLOCK TABLES;\n# a hash comment\n");
    let mut id = 0;
    for isu in &dataset.isus {
        // Newest first, so the importer has to sort.
        for condition in isu.conditions.iter().rev() {
            id += 1;
            let separator: &[u8] = if id % 3 == 1 {
                b"INSERT INTO `isu_condition` VALUES "
            } else {
                b",\n"
            };
            if id > 1 && id % 3 == 1 {
                dump.extend_from_slice(b";\n");
            }
            dump.extend_from_slice(separator);
            dump.extend_from_slice(format!("({id},").as_bytes());
            dump.extend_from_slice(&quoted(isu.uuid.as_bytes()));
            dump.extend_from_slice(
                format!(
                    ",'{}',{},",
                    jst_datetime(condition.timestamp),
                    u8::from(condition.flags.is_sitting())
                )
                .as_bytes(),
            );
            dump.extend_from_slice(&quoted(condition.flags.condition_string().as_bytes()));
            dump.push(b',');
            dump.extend_from_slice(&quoted(condition.message.as_bytes()));
            dump.extend_from_slice(b",'2021-08-01 00:00:00')");
        }
    }
    if id > 0 {
        dump.extend_from_slice(b";\n");
    }
    if !dataset.users.is_empty() {
        dump.extend_from_slice(b"INSERT INTO `user` (`jia_user_id`, `created_at`) VALUES ");
        let users: Vec<Vec<u8>> = dataset
            .users
            .iter()
            .map(|user| [b"(".as_slice(), &quoted(user.as_bytes()), b",NULL)"].concat())
            .collect();
        dump.extend_from_slice(&users.join(&b","[..]));
        dump.extend_from_slice(b";");
    }
    dump.extend_from_slice(b"\n/*!40101 SET character_set_client = @saved */;\n-- Dump completed\n");
    dump
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9-]{1,12}".prop_map(|text| text),
        vec(any::<char>(), 0..20).prop_map(|chars| chars.into_iter().collect()),
        Just("it's \"quoted\" \\ back\\slash \\% \\_ ;\n\r\u{0}\u{1a} 椅子".to_owned()),
    ]
}

/// Datasets with unique users, ids and UUIDs; conditions in any order, timestamps may repeat.
fn dataset() -> impl Strategy<Value = Dataset> {
    let condition = (1_000_000_000i64..4_000_000_000, any::<bool>(), 0..8u8, text()).prop_map(
        |(timestamp, sitting, bits, message)| WireCondition {
            timestamp,
            flags: Flags::new(sitting, bits << 1),
            message,
        },
    );
    let isu = (
        text(),
        prop_oneof![Just(String::new()), text()],
        text(),
        proptest::option::of(vec(any::<u8>(), 0..64)),
        vec(condition, 0..6),
    );
    (proptest::collection::btree_set(text(), 0..5), vec(isu, 0..6)).prop_map(|(users, isus)| {
        let isus = isus
            .into_iter()
            .enumerate()
            .map(|(index, (name, character, owner, image, conditions))| DatasetIsu {
                id: index as i64 * 7 + 1,
                uuid: format!("uuid-{index}"),
                name,
                character,
                owner,
                image,
                conditions,
            })
            .collect();
        Dataset {
            users: users.into_iter().collect(),
            isus,
        }
    })
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn the_importer_never_panics_on_arbitrary_bytes(dump in vec(any::<u8>(), 0..400)) {
        let _ = import(&dump);
    }

    #[test]
    fn the_importer_never_panics_on_sql_shaped_noise(
        pieces in vec(prop_oneof![
            Just("INSERT INTO `isu` VALUES "), Just("INSERT INTO `isu_condition` VALUES "), Just("INSERT INTO user "),
            Just("("), Just(")"), Just(","), Just(";"), Just("'"), Just("\\"), Just("0x"), Just("0xZ"), Just("_binary "),
            Just("NULL"), Just("-1.5e9"), Just("/*"), Just("*/"), Just("-- "), Just("#"), Just("\n"), Just("`"),
            Just("'2021-08-08 00:00:00'"), Just("'is_dirty=true,is_overweight=true,is_broken=true'"), Just("9223372036854775808"),
        ], 0..40),
    ) {
        let _ = import(pieces.concat().as_bytes());
    }

    #[test]
    fn any_prefix_of_a_dump_is_an_error_or_a_dataset_never_a_panic(
        dataset in dataset(),
        style in 0..3u8,
        cut in any::<prop::sample::Index>(),
    ) {
        let dump = render_dump(&dataset, style);
        let _ = import(&dump[..cut.index(dump.len() + 1)]);
    }

    #[test]
    fn a_rendered_dump_imports_back_to_the_same_dataset(dataset in dataset(), style in 0..3u8) {
        let mut dump = render_dump(&dataset, style);
        let imported = import(&dump).map_err(|error| TestCaseError::fail(format!("{error:#}")))?;
        // Conditions were written newest first; equal timestamps come back in dump order.
        let mut expected = dataset.clone();
        for isu in &mut expected.isus {
            isu.conditions.reverse();
            isu.conditions.sort_by_key(|condition| condition.timestamp);
        }
        prop_assert_eq!(imported, expected);
        // A dump with a byte changed is still never a panic.
        if !dump.is_empty() {
            let at = dump.len() / 2;
            dump[at] ^= 0x55;
            let _ = import(&dump);
        }
    }

    #[test]
    fn jst_datetimes_round_trip(unix in -62_135_596_800i64 + 86_400..253_402_300_799 - 86_400) {
        prop_assert_eq!(parse_jst_datetime(&jst_datetime(unix)), Some(unix));
    }

    #[test]
    fn datetime_parsing_never_panics(text in "[0-9 :.-]{0,26}") {
        let _ = parse_jst_datetime(&text);
    }
}

// ------------------------------------------------------------------ inter-node protocol

fn wire_condition() -> impl Strategy<Value = WireCondition> {
    (any::<i64>(), 0..16u8, text()).prop_map(|(timestamp, bits, message)| WireCondition {
        timestamp,
        flags: Flags(bits),
        message,
    })
}

fn shard_isu() -> impl Strategy<Value = ShardIsu> {
    (
        any::<i64>(),
        text(),
        text(),
        text(),
        text(),
        vec(wire_condition(), 0..4),
    )
        .prop_map(|(id, uuid, owner, name, character, conditions)| ShardIsu {
            id,
            uuid,
            owner,
            name,
            character,
            conditions,
        })
}

/// Decodes `bytes` as every message type; none may panic.
fn decode_every_message(bytes: &[u8]) {
    let _ = serde_json::from_slice::<ResetShard>(bytes);
    let _ = serde_json::from_slice::<UserSync>(bytes);
    let _ = serde_json::from_slice::<ProvisionalIsu>(bytes);
    let _ = serde_json::from_slice::<PublishIsu>(bytes);
    let _ = serde_json::from_slice::<RollbackIsu>(bytes);
    let _ = serde_json::from_slice::<LatestBatch>(bytes);
    let _ = serde_json::from_slice::<Health>(bytes);
    let _ = shared::protocol::decode_latest(bytes);
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn protocol_decoding_never_panics(bytes in vec(any::<u8>(), 0..300)) {
        decode_every_message(&bytes);
    }

    #[test]
    fn reset_and_latest_messages_round_trip(
        generation in any::<u64>(),
        users in vec(text(), 0..4),
        isus in vec(shard_isu(), 0..4),
        latest in vec((text(), wire_condition()), 0..4),
    ) {
        let reset = ResetShard { generation, users, isus };
        let decoded: ResetShard = serde_json::from_slice(&serde_json::to_vec(&reset).unwrap()).unwrap();
        prop_assert_eq!((decoded.generation, &decoded.users, &decoded.isus), (reset.generation, &reset.users, &reset.isus));
        let batch = LatestBatch {
            generation,
            items: latest
                .into_iter()
                .map(|(uuid, condition)| shared::protocol::LatestCondition { uuid, condition })
                .collect(),
        };
        let decoded: LatestBatch = serde_json::from_slice(&serde_json::to_vec(&batch).unwrap()).unwrap();
        prop_assert_eq!(&decoded.items, &batch.items);
        // The binary form: the same items back, and any cut of it refused.
        let binary = shared::protocol::encode_latest(generation, batch.borrowed());
        let (decoded_generation, items) = shared::protocol::decode_latest(&binary).unwrap();
        prop_assert_eq!(decoded_generation, generation);
        prop_assert_eq!(items, batch.borrowed());
        for cut in 0..binary.len() {
            prop_assert!(shared::protocol::decode_latest(&binary[..cut]).is_err());
        }
    }

    #[test]
    fn decoded_flags_always_agree_with_their_condition_string(bits in any::<u8>(), timestamp in any::<i64>()) {
        let body = format!(r#"{{"timestamp":{timestamp},"flags":{bits},"message":"m"}}"#);
        match serde_json::from_str::<WireCondition>(&body) {
            Ok(condition) => {
                prop_assert!(bits < 16);
                let text = condition.flags.condition_string();
                prop_assert_eq!(Flags::new(condition.flags.is_sitting(), parse_condition(text).unwrap()), condition.flags);
            }
            Err(_) => prop_assert!(bits >= 16),
        }
    }

    #[test]
    fn the_secret_check_accepts_exactly_the_secret(
        secret in "[!-~]{1,24}",
        given in "[!-~]{0,24}",
        use_bearer in any::<bool>(),
    ) {
        let header = if use_bearer { format!("Bearer {given}") } else { given.clone() };
        let accepted = if use_bearer {
            carries_secret(&secret, None, Some(header.as_bytes()))
        } else {
            carries_secret(&secret, Some(header.as_bytes()), None)
        };
        prop_assert_eq!(accepted, given == secret);
        prop_assert!(carries_secret(&secret, Some(secret.as_bytes()), None));
    }

    #[test]
    fn a_session_cookie_with_any_byte_changed_is_refused(
        user in text(),
        generation in any::<u64>(),
        position in any::<prop::sample::Index>(),
        replacement in any::<u8>(),
    ) {
        let key = SessionKey::from_secret("property secret");
        let cookie = key.sign(&user, generation);
        let verified = key.verify(&cookie).unwrap();
        prop_assert_eq!((verified.user.as_str(), verified.generation), (user.as_str(), generation));
        let mut bytes = cookie.clone().into_bytes();
        let at = position.index(bytes.len());
        prop_assume!(bytes[at] != replacement);
        bytes[at] = replacement;
        let forged = String::from_utf8_lossy(&bytes).into_owned();
        // base64 has spare bits in its last character: only a change that decodes to the
        // same bytes may still verify, and then it names the same session.
        if let Some(session) = key.verify(&forged) {
            prop_assert_eq!((session.user, session.generation), (user, generation));
        }
        prop_assert_eq!(SessionKey::from_secret("another secret").verify(&cookie), None);
    }
}
