//! Every record of every fixture's report validates against the JSON Schema of its type in
//! `docs/schema/`, and says which version of it it follows.
//!
//! The reports are the reviewed golden files (`tests/golden/`, every fixture with
//! `--sessions`), which `tests/golden.rs` holds equal to what the binary writes, and a report
//! over several files (`--fleet`), whose records cite files.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

const TYPES: [&str; 4] = ["resume", "finding", "session", "summary"];

fn validators() -> BTreeMap<&'static str, jsonschema::Validator> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    TYPES
        .iter()
        .map(|t| {
            let path = root.join("docs/schema").join(format!("{t}.json"));
            let text = std::fs::read_to_string(&path).expect("read the schema");
            let schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
            jsonschema::meta::validate(&schema)
                .unwrap_or_else(|e| panic!("{}: not a valid JSON Schema: {e}", path.display()));
            (
                *t,
                jsonschema::validator_for(&schema).expect("compile the schema"),
            )
        })
        .collect()
}

/// The JSON Lines of a golden file's standard output.
fn records(golden: &str) -> Vec<Value> {
    let stdout = golden.split_once("--- stdout\n").map_or("", |(_, s)| s);
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("a report line is JSON"))
        .collect()
}

fn problems(v: &jsonschema::Validator, record: &Value) -> Vec<String> {
    v.iter_errors(record)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

#[test]
fn every_record_of_every_fixture_validates() {
    let validators = validators();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/golden") {
        let path = entry.expect("a golden file").path();
        if path.extension().and_then(|e| e.to_str()) != Some("out") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).expect("read a golden file");
        for (n, record) in records(&text).iter().enumerate() {
            let kind = record["type"].as_str().unwrap_or("").to_string();
            let v = validators
                .get(kind.as_str())
                .unwrap_or_else(|| panic!("{}: line {n}: no schema for {kind:?}", path.display()));
            let errors = problems(v, record);
            assert!(
                errors.is_empty(),
                "{}: line {n}: {errors:#?}",
                path.display()
            );
            assert_eq!(record["schema_version"], json!(1), "{}", path.display());
            *seen.entry(kind).or_default() += 1;
        }
    }
    assert!(files > 100, "golden files not found: {files}");
    for t in TYPES {
        assert!(
            seen.get(t).copied().unwrap_or(0) > 0,
            "no {t} record: {seen:?}"
        );
    }
}

#[test]
fn records_of_several_files_validate() {
    let validators = validators();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-resume-audit"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["-q", "-j1", "--sessions", "--fleet"])
        .args([
            "fixtures/real-tool/loopback-v4.pcap",
            "fixtures/gen/verdict-gap-skipped.pcap",
        ])
        .output()
        .expect("run the binary");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    let all = records(&format!("--- stdout\n{text}"));
    assert!(text.contains("\"request_file\":") && text.contains("\"files\":["));
    for (n, record) in all.iter().enumerate() {
        let kind = record["type"].as_str().unwrap_or("");
        let errors = problems(&validators[kind], record);
        assert!(errors.is_empty(), "line {n}: {errors:#?}");
    }
}

#[test]
fn the_schemas_refuse_what_the_report_never_writes() {
    let validators = validators();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("tests/golden/gen__verdict-gap-skipped.pcap.out"))
        .expect("a golden file");
    let all = records(&text);
    let resume = all
        .iter()
        .find(|r| r["type"] == "resume")
        .expect("a resume");
    let summary = all
        .iter()
        .find(|r| r["type"] == "summary")
        .expect("a summary");
    assert!(problems(&validators["resume"], resume).is_empty());
    let broken = |base: &Value, f: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut r = base.clone();
        f(r.as_object_mut().expect("an object"));
        r
    };
    let bad_resumes = [
        broken(resume, &|r| {
            r.remove("verdict");
        }),
        broken(resume, &|r| {
            r.insert("verdict".into(), json!("fine"));
        }),
        broken(resume, &|r| {
            r.insert("undocumented".into(), json!(1));
        }),
        broken(resume, &|r| {
            r.insert("request_time".into(), json!("yesterday"));
        }),
        broken(resume, &|r| {
            r.insert("client_port".into(), json!(70_000));
        }),
        broken(resume, &|r| {
            r.insert("schema_version".into(), json!(2));
        }),
    ];
    for r in &bad_resumes {
        assert!(!problems(&validators["resume"], r).is_empty(), "{r}");
    }
    let bad_summary = broken(summary, &|r| {
        r["verdicts"]
            .as_object_mut()
            .expect("counts")
            .remove("correct");
    });
    assert!(!problems(&validators["summary"], &bad_summary).is_empty());
    // A record of one type is not one of another.
    assert!(!problems(&validators["summary"], resume).is_empty());
}
