//! Benchmark: what masking a kept delivery costs on the receiver's path (`providers::masking`:
//! the body's one-pass pre-scan, and JSON masking when it finds something; each header value's
//! shape), against a serde_json parse of the same body in the same run (the receiver already
//! parses every body once): three bodies (a generic delivery, a Replicate prediction, a body with
//! a key in it) and eight header values as a webhook carries them. Printed: nanoseconds a call,
//! and the ratio to the parse.
//!
//!     cargo run --release -p nevermiss-engine --example masking_bench [-- --calls 200000]

use std::time::Instant;

use nevermiss_engine::providers::masking::{looks_like_a_credential, mask_body};

fn per_call(calls: usize, mut f: impl FnMut() -> usize) -> f64 {
    let started = Instant::now();
    let mut sum = 0;
    for _ in 0..calls {
        sum += f();
    }
    std::hint::black_box(sum);
    started.elapsed().as_nanos() as f64 / calls as f64
}

fn parse(body: &[u8]) -> usize {
    serde_json::from_slice::<serde_json::Value>(body).map(|v| usize::from(v.is_object())).unwrap_or(0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut calls = 200_000;
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--calls", Some(n)) => calls = n.parse().expect("--calls takes a number"),
            _ => panic!("usage: masking_bench [--calls N]"),
        }
    }
    let generic = br#"{"deliveryId":"d-000123","jobId":"render-gamma-1234","state":"succeeded","seq":7,"label":"render gamma 1234","group":"sweep-7"}"#;
    let replicate = br#"{"id":"ufawqhfynnddngldkgtslldrkq","model":"black-forest-labs/flux-schnell","version":"dp-4d0bcc010b3049749a251855f12800be","input":{"prompt":"a lighthouse"},"logs":"","output":["https://replicate.delivery/xezq/out-0.webp"],"error":null,"status":"succeeded","created_at":"2026-12-01T10:00:00Z","urls":{"get":"https://api.replicate.com/v1/predictions/ufawqhfynnddngldkgtslldrkq","cancel":"https://api.replicate.com/v1/predictions/ufawqhfynnddngldkgtslldrkq/cancel"}}"#;
    let keyed = br#"{"deliveryId":"d-1","jobId":"j-1","state":"running","seq":1,"api_key":"sk-proj-abcdefghijklmnop"}"#;
    let bodies: [(&str, &[u8]); 3] = [("generic", generic), ("replicate", replicate), ("with a key", keyed)];
    for (name, body) in bodies {
        let parsed = per_call(calls, || parse(body));
        let masked = per_call(calls, || mask_body(body).len());
        println!("{name:>10} body ({} B): parse {parsed:.0} ns, mask_body {masked:.0} ns ({:.2} of a parse)", body.len(), masked / parsed);
    }
    let headers = [
        "application/json",
        "Replicate-Webhooks/1.0",
        "msg_2Abc3Def4Ghi",
        "1733050000",
        "v1,Zm9vYmFyYmF6cXV4cXV1eA==",
        "127.0.0.1:8787",
        "1234",
        "gzip",
    ];
    let parsed = per_call(calls, || parse(replicate));
    let shapes = per_call(calls, || headers.iter().filter(|h| looks_like_a_credential(h)).count());
    println!("8 header values' shapes: {shapes:.0} ns ({:.2} of the Replicate body's parse)", shapes / parsed);
}
