//! Decodes one AdmissionReview body with serde_json, sonic-rs and simd-json, in two shapes: the
//! whole document skipped (IgnoredAny: the least any parser does to accept it) and what the
//! webhook keeps (uid, name, namespace, operation, the object's type, name and spec). Prints
//! the time per decode, median of interleaved rounds, and with valgrind installed the
//! instructions per decode (callgrind counts, stable where timings are not), each as a ratio to
//! serde_json's.

use std::borrow::Cow;
use std::process::Command;
use std::time::Instant;

use serde::Deserialize;
use serde::de::IgnoredAny;

#[derive(Deserialize)]
struct Review<'a> {
    #[serde(borrow)]
    request: Option<Request<'a>>,
}

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    uid: Cow<'a, str>,
    #[serde(borrow, default)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow)]
    operation: Cow<'a, str>,
    #[serde(borrow, default)]
    object: Option<Object<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Object<'a> {
    #[serde(borrow, default)]
    api_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    metadata: Option<Metadata<'a>>,
    #[serde(default)]
    spec: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Metadata<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

const PARSERS: [&str; 3] = ["serde_json", "sonic-rs", "simd-json"];
const SHAPES: [&str; 2] = ["skipped", "kept"];

/// One decode; what it read, so that nothing is optimised away.
fn decode(parser: &str, shape: &str, body: &[u8]) -> Result<usize, String> {
    fn kept(review: Review<'_>) -> usize {
        review.request.map_or(0, |r| {
            r.uid.len()
                + r.name.len()
                + r.namespace.map_or(0, |n| n.len())
                + r.operation.len()
                + r.object.map_or(0, |o| {
                    o.api_version.map_or(0, |v| v.len())
                        + o.kind.map_or(0, |k| k.len())
                        + o.metadata.and_then(|m| m.name).map_or(0, |n| n.len())
                        + o.spec.map_or(0, |s| s.as_object().map_or(0, |m| m.len()))
                })
        })
    }
    let e = |e: &dyn std::fmt::Display| format!("{parser}: {e}");
    match (parser, shape) {
        ("serde_json", "skipped") => serde_json::from_slice::<IgnoredAny>(body)
            .map(|_| 1)
            .map_err(|x| e(&x)),
        ("serde_json", _) => serde_json::from_slice(body).map(kept).map_err(|x| e(&x)),
        ("sonic-rs", "skipped") => sonic_rs::from_slice::<IgnoredAny>(body)
            .map(|_| 1)
            .map_err(|x| e(&x)),
        ("sonic-rs", _) => sonic_rs::from_slice(body).map(kept).map_err(|x| e(&x)),
        // simd-json parses in place: the copy is part of what it costs a server.
        ("simd-json", "skipped") => {
            let mut copy = body.to_vec();
            simd_json::serde::from_slice::<IgnoredAny>(&mut copy)
                .map(|_| 1)
                .map_err(|x| e(&x))
        }
        _ => {
            let mut copy = body.to_vec();
            simd_json::serde::from_slice(&mut copy)
                .map(kept)
                .map_err(|x| e(&x))
        }
    }
}

fn run(parser: &str, shape: &str, body: &[u8], n: usize) -> Result<usize, String> {
    let mut read = 0;
    for _ in 0..n {
        read += decode(parser, shape, std::hint::black_box(body))?;
    }
    Ok(read)
}

/// Instructions per decode under callgrind: two runs of this program, n and 3n decodes, so
/// that start-up cancels out. None without valgrind.
fn instructions(parser: &str, shape: &str, path: &str, n: usize) -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let count = |k: usize| -> Option<f64> {
        let out = Command::new("valgrind")
            .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
            .arg(&exe)
            .args([path, "--only", parser, shape, &k.to_string()])
            .output()
            .ok()
            // A build valgrind cannot run (AVX-512 with target-cpu=native) counts nothing.
            .filter(|out| out.status.success())?;
        let log = String::from_utf8_lossy(&out.stderr);
        let line = log.lines().find(|l| l.contains("Collected"))?;
        line.rsplit(' ').next()?.replace(',', "").parse().ok()
    };
    Some((count(3 * n)? - count(n)?) / (2 * n) as f64)
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .ok_or("usage: bench-parsers REVIEW.json [--rounds 7] [--decodes 20000]")?;
    let body = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let body = body.trim_ascii_end();
    if let [_, only, parser, shape, n] = &args[..]
        && only == "--only"
    {
        let n = n.parse().map_err(|e| format!("{n}: {e}"))?;
        return run(parser, shape, body, n).map(|_| ());
    }
    let flag = |name: &str, default: usize| -> Result<usize, String> {
        match args.iter().position(|a| a == name) {
            None => Ok(default),
            Some(i) => args
                .get(i + 1)
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{name} needs a count")),
        }
    };
    let (rounds, decodes) = (flag("--rounds", 7)?, flag("--decodes", 20_000)?);
    // Every parser must read the review alike before any is timed.
    for shape in SHAPES {
        let read: Vec<usize> = PARSERS
            .iter()
            .map(|p| decode(p, shape, body))
            .collect::<Result<_, _>>()?;
        if read.windows(2).any(|w| w[0] != w[1]) {
            return Err(format!(
                "the parsers read the {shape} shape differently: {read:?}"
            ));
        }
    }
    println!(
        "{} byte review, {decodes} decodes per parser and round, {rounds} interleaved rounds",
        body.len()
    );
    for shape in SHAPES {
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); PARSERS.len()];
        for _ in 0..rounds {
            for (i, parser) in PARSERS.iter().enumerate() {
                let start = Instant::now();
                run(parser, shape, body, decodes)?;
                times[i].push(start.elapsed().as_nanos() as f64 / decodes as f64);
            }
        }
        let medians: Vec<f64> = times
            .iter_mut()
            .map(|t| {
                t.sort_by(f64::total_cmp);
                t[t.len() / 2]
            })
            .collect();
        let counts: Vec<Option<f64>> = PARSERS
            .iter()
            .map(|p| instructions(p, shape, path, 2_000))
            .collect();
        for (i, parser) in PARSERS.iter().enumerate() {
            let counted = match (counts[i], counts[0]) {
                (Some(c), Some(base)) => {
                    format!("{c:>8.0} instructions ({:.2}x)", c / base)
                }
                _ => "instructions: not counted (no valgrind, or it cannot run this build)".into(),
            };
            println!(
                "{shape:<8} {parser:<11} {:>7.0} ns per decode ({:.2}x serde_json)   {counted}",
                medians[i],
                medians[i] / medians[0]
            );
        }
    }
    Ok(())
}
