//! `--html FILE`: the page is written beside the JSON Lines without changing them, it embeds
//! exactly the lines of the report (with the session views), and it works in a real browser.
//!
//! The browser test runs `tests/browser/report.mjs` with Node.js against Debian's Chromium
//! (`/usr/bin/chromium`, or `$CHROMIUM`). Without either it is skipped with a message, except
//! under `CI`, where it fails: CI installs them (`apt-get install -y chromium`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Captures and HARs with every verdict, findings, capture gaps and sessionless resumes.
const FIXTURES: [&str; 6] = [
    "fixtures/real/py-counter.pcap",
    "fixtures/real/ts-sdk.pcap",
    "fixtures/gen/mixed.pcap",
    "fixtures/har/mixed.har",
    "fixtures/real-tool/loopback-v4.pcap",
    "fixtures/coverage-real/py-snaplen200.pcap",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A folder of the test's own, removed when it is dropped: also when the test fails.
fn out_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("mra-html-test-{name}-"))
        .tempdir()
        .expect("a temporary folder")
}

/// Runs the binary; returns standard output and the exit status.
fn run(args: &[&str]) -> (Vec<u8>, Option<i32>) {
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume-audit"))
        .current_dir(root())
        .args(["-q", "-j2"])
        .args(args)
        .output()
        .expect("run the binary");
    (out.stdout, out.status.code())
}

/// The lines embedded in a page.
fn embedded(html: &str) -> Vec<serde_json::Value> {
    let open = "<script type=\"application/json\" id=\"mra-data\">";
    let from = html.find(open).expect("data block") + open.len();
    let to = from
        + html[from..]
            .find("</script>")
            .expect("end of the data block");
    serde_json::from_str(&html[from..to]).expect("the data block is one JSON array")
}

fn lines(jsonl: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(jsonl)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_json_lines_do_not_change_and_the_page_holds_them() {
    let dir = out_dir("same");
    for sessions in [false, true] {
        let mut base: Vec<&str> = if sessions { vec!["--sessions"] } else { vec![] };
        base.extend(FIXTURES);
        let (plain, code) = run(&base);
        let page = dir.path().join(format!("r-{sessions}.html"));
        let page_arg = page.to_str().unwrap();
        let mut with = vec!["--html", page_arg];
        with.extend(&base);
        let (teed, code_html) = run(&with);
        assert!(
            plain == teed,
            "--html changed the JSON Lines (sessions {sessions})"
        );
        assert_eq!(code, code_html);
        let html = std::fs::read_to_string(&page).unwrap();
        // The page holds every line of the report with --sessions, in its order.
        let mut all = vec!["--sessions"];
        all.extend(FIXTURES);
        let (with_views, _) = run(&all);
        assert_eq!(embedded(&html), lines(&with_views));
        // Self-contained: nothing is loaded from elsewhere.
        for outside in ["src=", "href=", "@import", "url(http"] {
            assert!(!html.contains(outside), "{outside} in the page");
        }
        assert!(html.len() < 1 << 20, "{} bytes", html.len());
    }
    // Only the page is left: its temporary file was renamed.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
}

#[test]
fn text_format_still_writes_the_page() {
    let dir = out_dir("text");
    let page = dir.path().join("r.html");
    let (out, _) = run(&[
        "--format",
        "text",
        "--html",
        page.to_str().unwrap(),
        "fixtures/gen/mixed.pcap",
    ]);
    assert!(!out.starts_with(b"{"), "text, not JSON, on the output");
    let html = std::fs::read_to_string(&page).unwrap();
    let embedded = embedded(&html);
    assert!(embedded.iter().any(|l| l["type"] == "session"));
    assert_eq!(embedded.last().unwrap()["type"], "summary");
}

#[test]
fn a_page_that_cannot_be_written_is_an_error_before_the_analysis() {
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume-audit"))
        .current_dir(root())
        .args([
            "--html",
            "/nonexistent-dir/r.html",
            "fixtures/gen/mixed.pcap",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent-dir/"));
}

/// Node.js and Chromium, or why the browser test cannot run.
fn browser() -> Result<(PathBuf, PathBuf), String> {
    let chromium = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if !chromium.exists() {
        return Err(format!(
            "{} not found (apt-get install -y chromium)",
            chromium.display()
        ));
    }
    let node = PathBuf::from("node");
    match Command::new(&node).arg("--version").output() {
        Ok(o) if o.status.success() => Ok((node, chromium)),
        _ => Err("node (Node.js 18 or later) not found".to_string()),
    }
}

/// Opens `page` in Chromium with the checks of report.mjs; `expect` as it takes it.
fn open_in_browser(page: &Path, expect: &serde_json::Value, extra: &[&str]) -> bool {
    let (node, chromium) = match browser() {
        Ok(b) => b,
        Err(why) => {
            if std::env::var_os("CI").is_some() {
                panic!("the browser test cannot run under CI: {why}");
            }
            eprintln!("skipped: the browser test needs {why}");
            return false;
        }
    };
    // The browser's profile goes in a folder of this test's, removed when the test ends
    // whatever the script managed to remove.
    let scratch = tempfile::tempdir().expect("a temporary folder");
    let out = Command::new(node)
        .env("TMPDIR", scratch.path())
        .arg(root().join("tests/browser/report.mjs"))
        .arg("--html")
        .arg(page)
        .arg("--chromium")
        .arg(chromium)
        .arg("--expect")
        .arg(expect.to_string())
        .args(extra)
        .output()
        .expect("run node");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the page failed in the browser:\n{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// What the browser must find: the report's verdict counts and a few session ids to search.
fn expectation(jsonl: &[u8]) -> serde_json::Value {
    let lines = lines(jsonl);
    let summary = lines.last().unwrap();
    assert_eq!(summary["type"], "summary");
    let mut sessions: Vec<String> = lines
        .iter()
        .filter_map(|l| l["session_id"].as_str().map(str::to_string))
        .collect();
    sessions.sort();
    sessions.dedup();
    sessions.truncate(3);
    serde_json::json!({"verdicts": summary["verdicts"], "sessions": sessions})
}

#[test]
fn the_page_works_in_a_browser() {
    let dir = out_dir("browser");
    let page = dir.path().join("r.html");
    let mut args = vec!["--html", page.to_str().unwrap()];
    args.extend(FIXTURES);
    let (jsonl, _) = run(&args);
    let expect = expectation(&jsonl);
    // A screenshot for the README, when asked: HTML_SCREENSHOT=docs/html-report.png.
    let shot = std::env::var("HTML_SCREENSHOT").ok();
    let mut extra = vec![];
    if let Some(s) = &shot {
        extra.extend(["--screenshot", s.as_str()]);
    }
    open_in_browser(&page, &expect, &extra);
}

#[test]
fn hostile_session_ids_stay_text_in_a_browser() {
    let dir = out_dir("hostile");
    // A HAR whose session ids are markup.
    let har = std::fs::read_to_string(root().join("fixtures/har/mixed.har")).unwrap();
    let hostile = r#"</script><img src=x onerror=\"window.__pwned=1\"><!--"#;
    let har = har
        .replace("\"mix-a\"", &format!("\"{hostile}\""))
        .replace("\"mix-b\"", &format!("\"{hostile}&amp;\""));
    let input = dir.path().join("hostile.har");
    std::fs::write(&input, har).unwrap();
    let page = dir.path().join("r.html");
    let (jsonl, _) = run(&["--html", page.to_str().unwrap(), input.to_str().unwrap()]);
    let lines = lines(&jsonl);
    assert!(
        lines
            .iter()
            .any(|l| l["session_id"].as_str().is_some_and(|s| s.contains("<img"))),
        "the hostile id reached the report"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("<img"));
    let mut expect = expectation(&jsonl);
    expect["sessions"] = serde_json::json!(["<img"]);
    expect["har"] = serde_json::json!(true);
    open_in_browser(&page, &expect, &["--hostile"]);
}

#[test]
fn past_the_threshold_the_page_is_paged_in_a_browser() {
    use mcp_resume_audit::stages::{HtmlReport, PAGE_SESSIONS, PAGINATE_ABOVE, page_plan};
    use std::io::Write;
    let dir = out_dir("paged");
    let page = dir.path().join("r.html");
    let n = PAGINATE_ABOVE + PAGE_SESSIONS + 1;
    let mut h = HtmlReport::create(&page, &["many".to_string()]).unwrap();
    let mut sink = Vec::new();
    {
        let mut tee = h.tee(&mut sink, true);
        for i in 0..n {
            let line = serde_json::json!({
                "type": "session", "input": "many", "session_id": format!("s-{i:05}"),
                "protocol_versions": [], "first_time": "2026-01-01T00:00:00.000000Z",
                "last_time": "2026-01-01T00:00:01.000000Z", "exchanges": [],
                "exchanges_omitted": 0, "resumes": [], "findings": []
            });
            writeln!(tee, "{line}").unwrap();
        }
        writeln!(
            tee,
            "{}",
            serde_json::json!({"type": "summary", "sessions": n})
        )
        .unwrap();
        tee.flush().unwrap();
    }
    h.finish().unwrap();
    let plan = page_plan(n);
    assert!(plan.paged);
    let pages = plan.pages.to_string();
    let per_page = plan.per_page.to_string();
    let expect = serde_json::json!({"verdicts": {}, "sessions": []});
    open_in_browser(
        &page,
        &expect,
        &["--pages", &pages, "--per_page", &per_page],
    );
}
