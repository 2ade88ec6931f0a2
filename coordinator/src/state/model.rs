//! The plain data the state modules share: a registered ISU with its latest condition, and
//! a registration's outcome. A leaf: it uses no other module of the coordinator, so the
//! generation, the trend and the registration protocol can all hold these without using
//! each other.

use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use shared::domain::Flags;
use shared::protocol::LatestItem;

/// The latest condition of an ISU, as pushed by its worker. A message of up to 24 bytes
/// (most: a device's messages are short) is held inline: no allocation of its own, none
/// for each push that replaces it, and no more room in the ISU than a `Box<str>` left
/// unused in its allocator block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Latest {
    pub timestamp: i64,
    pub flags: Flags,
    pub message: compact_str::CompactString,
}

/// A string many ISUs share (an owner, a character), behind a thin pointer: 8 bytes in each
/// ISU instead of an `Arc<str>`'s 16. Compared, hashed and shown as its text.
#[derive(Clone)]
pub struct SharedStr(Arc<Box<str>>);

impl SharedStr {
    /// Whether both are the same string held once (not only equal texts).
    pub fn ptr_eq(one: &SharedStr, other: &SharedStr) -> bool {
        Arc::ptr_eq(&one.0, &other.0)
    }

    /// The address of the string held once, read without following it (the trend tells
    /// characters apart by it).
    pub fn address(&self) -> *const Box<str> {
        Arc::as_ptr(&self.0)
    }
}

impl std::ops::Deref for SharedStr {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for SharedStr {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<&str> for SharedStr {
    fn from(text: &str) -> SharedStr {
        SharedStr(Arc::new(text.into()))
    }
}

impl PartialEq for SharedStr {
    fn eq(&self, other: &SharedStr) -> bool {
        **self == **other
    }
}

impl Eq for SharedStr {}

impl std::hash::Hash for SharedStr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl std::fmt::Debug for SharedStr {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(formatter)
    }
}

impl std::fmt::Display for SharedStr {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(formatter)
    }
}

/// An ISU's own icon. Most ISUs have the default one and hold none: the ISU keeps 8 bytes
/// for its icon instead of the 40 of bytes and a hash.
#[derive(Debug)]
pub struct OwnIcon {
    /// The icon's bytes; empty on a replica that has yet to fetch the icon `hash` names.
    pub bytes: Bytes,
    /// Replicas: the icon's hash in the icon stores (`None` on a lone coordinator, whose
    /// log holds the bytes).
    pub hash: Option<crate::icons::IconHash>,
}

impl OwnIcon {
    /// An ISU's icon from its bytes, its hash or both; `None` (the default icon) for
    /// neither, or for bytes that are the default icon's and no hash.
    pub fn of(
        bytes: Option<Bytes>,
        hash: Option<crate::icons::IconHash>,
        default_icon: &Bytes,
    ) -> Option<Box<OwnIcon>> {
        match (bytes, hash) {
            (None, None) => None,
            (Some(bytes), None) if bytes == *default_icon => None,
            (bytes, hash) => Some(Box::new(OwnIcon {
                bytes: bytes.unwrap_or_default(),
                hash,
            })),
        }
    }
}

/// A registered (published) ISU. A generation holds a million of these on a large
/// deployment, so it is kept small (112 bytes, 128 with its `Arc`'s counts: one 128-byte
/// block of mimalloc's): the UUID is the generation's index key itself (see
/// `UuidIndex`), the owner and the character are thin pointers to strings shared with
/// every other ISU of theirs (see `Generation::insert`), and an icon of its own is boxed
/// (most ISUs have the default one).
#[derive(Debug)]
pub struct Isu {
    pub id: i64,
    pub uuid: Box<str>,
    pub name: Box<str>,
    pub character: SharedStr,
    pub owner: SharedStr,
    /// `None`: the default icon.
    pub icon: Option<Box<OwnIcon>>,
    pub(super) latest: Mutex<Option<Latest>>,
}

impl Isu {
    /// The icon's hash in the icon stores, if it has one of its own named so.
    pub fn icon_hash(&self) -> Option<crate::icons::IconHash> {
        self.icon.as_ref().and_then(|icon| icon.hash)
    }

    pub fn latest(&self) -> Option<Latest> {
        self.latest.lock().clone()
    }

    /// Timestamp and flags of the latest condition, without copying its message.
    pub(super) fn latest_key(&self) -> Option<(i64, Flags)> {
        self.latest
            .lock()
            .as_ref()
            .map(|latest| (latest.timestamp, latest.flags))
    }

    /// Keeps the condition with the greatest timestamp; true when it changed.
    pub(super) fn offer_latest(&self, condition: &LatestItem<'_>) -> bool {
        let mut latest = self.latest.lock();
        if latest
            .as_ref()
            .is_some_and(|current| current.timestamp >= condition.timestamp)
        {
            return false;
        }
        *latest = Some(Latest {
            timestamp: condition.timestamp,
            flags: condition.flags,
            message: condition.message.into(),
        });
        true
    }
}

/// Outcome of a registration, seen by concurrent registrations of the same UUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Pending,
    Published,
    Failed,
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use shared::domain::parse_condition;

    /// An ISU of `alice` with no condition yet.
    pub(in crate::state) fn isu(id: i64, character: &str) -> Isu {
        Isu {
            id,
            uuid: format!("uuid-{id}").into(),
            name: format!("isu {id}").into(),
            character: character.into(),
            owner: "alice".into(),
            icon: None,
            latest: Mutex::new(None),
        }
    }

    /// A pushed condition of `timestamp` in the API's `is_dirty=…,…` form.
    pub(in crate::state) fn condition(timestamp: i64, condition: &str) -> LatestItem<'static> {
        LatestItem {
            uuid: "",
            timestamp,
            flags: Flags::new(false, parse_condition(condition).unwrap()),
            message: "",
        }
    }

    #[test]
    fn an_isu_fits_a_128_byte_block_with_its_arc_counts() {
        assert_eq!(std::mem::size_of::<Isu>() + 16, 128);
    }

    #[test]
    fn latest_keeps_the_greatest_timestamp() {
        let isu = isu(1, "c");
        assert!(isu.offer_latest(&condition(10, "is_dirty=false,is_overweight=false,is_broken=false")));
        assert!(!isu.offer_latest(&condition(5, "is_dirty=true,is_overweight=true,is_broken=true")));
        assert!(!isu.offer_latest(&condition(10, "is_dirty=true,is_overweight=true,is_broken=true")));
        assert_eq!(isu.latest().unwrap().timestamp, 10);
    }

    #[test]
    fn a_short_message_is_held_inline_and_a_long_one_whole() {
        let isu = isu(1, "c");
        let pushed = |timestamp, message| LatestItem {
            timestamp,
            message,
            ..condition(0, "is_dirty=false,is_overweight=false,is_broken=false")
        };
        assert!(isu.offer_latest(&pushed(1, "今日もいい天気")));
        let short = isu.latest().unwrap().message;
        assert_eq!((short.as_str(), short.is_heap_allocated()), ("今日もいい天気", false));
        let long = "座り心地がよくて、ずっと座っていたい";
        assert!(isu.offer_latest(&pushed(2, long)));
        assert_eq!(isu.latest().unwrap().message, long);
    }
}
