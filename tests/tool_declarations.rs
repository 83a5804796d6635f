//! ListTools: every declaration's parameters are a valid JSON Schema (checked
//! against the meta-schema), ready to paste into a model request, and every
//! example call a declaration carries (`parameters.examples`) validates
//! against its schema and succeeds when fed through the service.

use crate::file_support;
use crate::support;

use file_support::*;
use serde_json::{Value, json};
use support::*;
use toolsched::api::convert::struct_to_json;
use toolsched::api::pb;

/// The tools of this area: each must declare at least one example.
const FILE_TOOLS: &[&str] = &[
    "glob",
    "grep_search",
    "list_directory",
    "read_file",
    "replace",
    "write_file",
];

/// The files the declared examples refer to.
fn fixture(srv: &TestServer) {
    put(srv, "README.md", "# Demo\n");
    put(
        srv,
        "src/main.rs",
        "fn main() {\n    println!(\"hello\");\n}\n// TODO: more\n",
    );
}

async fn declarations() -> Vec<(String, Value)> {
    let srv = TestServer::start().await;
    let tools = srv
        .client
        .clone()
        .list_tools(pb::ListToolsRequest {})
        .await
        .unwrap()
        .into_inner()
        .tools;
    tools
        .into_iter()
        .map(|t| {
            let params = Value::Object(struct_to_json(t.parameters.expect("parameters")));
            (t.name, params)
        })
        .collect()
}

#[tokio::test]
async fn every_declared_schema_is_valid_json_schema() {
    let decls = declarations().await;
    let names: Vec<&str> = decls.iter().map(|(n, _)| n.as_str()).collect();
    for tool in FILE_TOOLS {
        assert!(names.contains(tool), "{tool} is not registered: {names:?}");
    }
    for (name, schema) in &decls {
        if let Err(e) = jsonschema::meta::validate(schema) {
            panic!("{name}: parameters are not a valid JSON Schema: {e}");
        }
        assert_eq!(schema["type"], json!("object"), "{name}");
        let props = schema["properties"].as_object().expect("properties");
        for (prop, def) in props {
            assert!(
                def["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{name}.{prop} has no description"
            );
        }
        for req in schema["required"].as_array().into_iter().flatten() {
            assert!(
                props.contains_key(req.as_str().unwrap()),
                "{name}: required {req}"
            );
        }
    }
}

#[tokio::test]
async fn every_declared_example_call_runs_through_the_service() {
    let decls = declarations().await;
    let mut fed = Vec::new();
    let mut without = Vec::new();
    for (name, schema) in &decls {
        let examples = schema["examples"].as_array().cloned().unwrap_or_default();
        if examples.is_empty() {
            without.push(name.clone());
            continue;
        }
        let validator = jsonschema::validator_for(schema).unwrap();
        for example in examples {
            assert!(
                validator.is_valid(&example),
                "{name}: example {example} does not match its own schema"
            );
            // A fresh workspace per example: each one sees the fixture.
            let srv = TestServer::with_config(yolo()).await;
            fixture(&srv);
            let events = run_one(&srv, name, example.clone()).await;
            assert_eq!(
                states(&events, "c"),
                ["validating", "scheduled", "executing", "success"],
                "{name} {example}: {events:?}"
            );
            fed.push(name.clone());
        }
    }
    for tool in FILE_TOOLS {
        assert!(
            fed.iter().any(|f| f == tool),
            "{tool} declares no example call"
        );
    }
    if !without.is_empty() {
        eprintln!("NOTE: these tools declare no example calls, so none were fed: {without:?}");
    }
}
