//! What one device may take of the admin API, so that no device can lock the owner out or spend
//! the owner's provider keys at its own pace: live event streams (each holds a connection of the
//! API's `MAX_API_CONNECTIONS` for as long as it lasts) and the actions that call a provider with
//! the owner's key (track, poll now). The owner is never limited here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{ApiError, Caller};

/// Most connections the admin API keeps open at once: the UI's tabs (one event stream each) and
/// the CLI need a handful; a hub's devices one stream each. Below the receiver's, so idle API
/// connections cannot take the file descriptors the receiver needs.
pub const MAX_API_CONNECTIONS: usize = 256;

/// Live event streams one device may hold at once (a UI tab holds one).
pub const STREAMS_PER_DEVICE: usize = 4;
/// Live event streams all devices together may hold: half of the API's connections, so the
/// other half is always there for the owner and for short calls.
pub const STREAMS_OF_ALL_DEVICES: usize = MAX_API_CONNECTIONS / 2;
/// Provider calls a device may cause in a burst (tracks and polls now), then one per
/// `DEVICE_CALL_EVERY`.
pub const DEVICE_CALL_BURST: u32 = 20;
pub const DEVICE_CALL_EVERY: Duration = Duration::from_secs(3);

/// How many live event streams each device holds.
type Held = Arc<Mutex<HashMap<String, usize>>>;

/// The live event streams held, per device.
#[derive(Default)]
pub struct StreamSlots {
    held: Held,
}

/// One stream's place, given back when the stream ends (the client left or the engine stops).
pub struct StreamSlot {
    /// The count it is in, and the device's name; none for the owner's streams.
    held: Option<(Held, String)>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        if let Some((held, device)) = self.held.take() {
            let mut held = held.lock().unwrap();
            if let Some(count) = held.get_mut(&device) {
                *count -= 1;
                if *count == 0 {
                    held.remove(&device);
                }
            }
        }
    }
}

impl StreamSlots {
    /// A place for one more stream of `caller`'s, or 429 when the device holds its share or the
    /// devices together hold theirs.
    pub fn take(&self, caller: &Caller) -> Result<StreamSlot, ApiError> {
        let Caller::Device(device) = caller else { return Ok(StreamSlot { held: None }) };
        let mut held = self.held.lock().unwrap();
        let all: usize = held.values().sum();
        let mine = held.get(device).copied().unwrap_or(0);
        if mine >= STREAMS_PER_DEVICE {
            return Err(ApiError::TooMany(format!("a device may hold {STREAMS_PER_DEVICE} live event streams at once: close one first")));
        }
        if all >= STREAMS_OF_ALL_DEVICES {
            return Err(ApiError::TooMany("the devices hold as many live event streams as the hub gives them: try again later".into()));
        }
        *held.entry(device.clone()).or_default() += 1;
        Ok(StreamSlot { held: Some((self.held.clone(), device.clone())) })
    }
}

/// The provider calls each device may still cause now: a token bucket per device.
#[derive(Default)]
pub struct DeviceCalls {
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl DeviceCalls {
    /// Counts one provider call `caller` causes, or 429 (with when to try again) past its share.
    pub fn take(&self, caller: &Caller) -> Result<(), ApiError> {
        let Caller::Device(device) = caller else { return Ok(()) };
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap();
        // Forget devices whose bucket is full again (a device that stopped calling holds nothing).
        let full_after = DEVICE_CALL_EVERY * DEVICE_CALL_BURST;
        buckets.retain(|_, (_, at)| now.duration_since(*at) < full_after);
        let (tokens, at) = buckets.entry(device.clone()).or_insert((f64::from(DEVICE_CALL_BURST), now));
        let refilled = now.duration_since(*at).as_secs_f64() / DEVICE_CALL_EVERY.as_secs_f64();
        *tokens = (*tokens + refilled).min(f64::from(DEVICE_CALL_BURST));
        *at = now;
        if *tokens < 1.0 {
            let wait = DEVICE_CALL_EVERY.as_secs_f64() * (1.0 - *tokens);
            return Err(ApiError::TooMany(format!(
                "a device may ask providers {DEVICE_CALL_BURST} times at once, then once every {} s: try again in {} s",
                DEVICE_CALL_EVERY.as_secs(),
                wait.ceil() as u64
            )));
        }
        *tokens -= 1.0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_holds_its_share_of_streams_and_gets_each_back_when_it_ends() {
        let slots = StreamSlots::default();
        let laptop = Caller::Device("laptop".into());
        let held: Vec<StreamSlot> = (0..STREAMS_PER_DEVICE).map(|_| slots.take(&laptop).unwrap()).collect();
        assert!(matches!(slots.take(&laptop), Err(ApiError::TooMany(_))));
        assert!(slots.take(&Caller::Device("phone".into())).is_ok(), "another device has its own share");
        for _ in 0..1000 {
            assert!(slots.take(&Caller::Admin).is_ok(), "the owner is never limited");
        }
        drop(held);
        assert!(slots.take(&laptop).is_ok(), "an ended stream's place is given back");
        assert!(slots.held.lock().unwrap().values().all(|n| *n <= 1));
    }

    #[test]
    fn the_devices_together_never_hold_more_than_half_the_connections() {
        let slots = StreamSlots::default();
        let mut held = Vec::new();
        for device in 0.. {
            match slots.take(&Caller::Device(format!("d{device}"))) {
                Ok(slot) => held.push(slot),
                Err(_) => break,
            }
        }
        assert_eq!(held.len(), STREAMS_OF_ALL_DEVICES);
    }

    #[test]
    fn a_device_causes_a_burst_of_provider_calls_then_waits() {
        let calls = DeviceCalls::default();
        let laptop = Caller::Device("laptop".into());
        for n in 0..DEVICE_CALL_BURST {
            assert!(calls.take(&laptop).is_ok(), "call {n} of the burst");
        }
        let Err(ApiError::TooMany(why)) = calls.take(&laptop) else { panic!("past the burst") };
        assert!(why.contains("try again in"), "{why}");
        assert!(calls.take(&Caller::Device("phone".into())).is_ok());
        assert!((0..1000).all(|_| calls.take(&Caller::Admin).is_ok()));
    }
}
