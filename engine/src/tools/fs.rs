//! `read_file`, `list_dir` and `write_file`. Relative paths resolve against the
//! session's directory.

use serde_json::{Value, json};

use crate::provider::ToolSpec;
use crate::tools::{BoxFuture, Prepared, Tool, ToolContext, ToolOutput, cap_output, string_arg};

fn path_schema(extra: Value) -> Value {
    let mut properties = json!({"path": {"type": "string", "description": "File path, relative to the session directory or absolute"}});
    if let Value::Object(extra) = extra {
        properties.as_object_mut().unwrap().extend(extra);
    }
    let required: Vec<&String> = properties.as_object().unwrap().keys().collect();
    json!({"type": "object", "properties": properties, "required": required})
}

/// Runs a quick filesystem call off the async threads.
fn blocking(f: impl FnOnce() -> ToolOutput + Send + 'static) -> Prepared {
    Prepared::new(None, move |_stop| {
        Box::pin(async move {
            tokio::task::spawn_blocking(f)
                .await
                .unwrap_or_else(|e| ToolOutput::Failed(format!("the tool panicked: {e}")))
        })
    })
}

#[derive(Debug)]
pub struct ReadFile;

impl Tool for ReadFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read_file".into(),
            description: "Read a text file.".into(),
            parameters: path_schema(json!({})),
        }
    }

    fn prepare(&self, ctx: &ToolContext, input: &Value) -> BoxFuture<Result<Prepared, String>> {
        let prepared = string_arg(input, "path").map(|path| {
            let path = ctx.resolve(path);
            let limit = ctx.config.output_limit_bytes;
            blocking(move || match std::fs::read(&path) {
                Ok(bytes) => {
                    let (output, truncated) =
                        cap_output(String::from_utf8_lossy(&bytes).into_owned(), limit);
                    ToolOutput::Completed {
                        output,
                        structured: Some(json!({"bytes": bytes.len(), "truncated": truncated})),
                    }
                }
                Err(e) => ToolOutput::Failed(format!("cannot read {}: {e}", path.display())),
            })
        });
        Box::pin(async move { prepared })
    }
}

#[derive(Debug)]
pub struct ListDir;

impl Tool for ListDir {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "list_dir".into(),
            description: "List a directory's entries (directories end with /).".into(),
            parameters: path_schema(json!({})),
        }
    }

    fn prepare(&self, ctx: &ToolContext, input: &Value) -> BoxFuture<Result<Prepared, String>> {
        let prepared = string_arg(input, "path").map(|path| {
            let path = ctx.resolve(path);
            let limit = ctx.config.output_limit_bytes;
            blocking(move || {
                let entries = match std::fs::read_dir(&path) {
                    Ok(entries) => entries,
                    Err(e) => {
                        return ToolOutput::Failed(format!("cannot list {}: {e}", path.display()));
                    }
                };
                let mut names: Vec<String> = entries
                    .flatten()
                    .map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        if e.file_type().is_ok_and(|t| t.is_dir()) {
                            format!("{name}/")
                        } else {
                            name
                        }
                    })
                    .collect();
                names.sort();
                let count = names.len();
                let (output, _) = cap_output(names.join("\n"), limit);
                ToolOutput::Completed {
                    output,
                    structured: Some(json!({"entries": count})),
                }
            })
        });
        Box::pin(async move { prepared })
    }
}

#[derive(Debug)]
pub struct WriteFile;

impl Tool for WriteFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "write_file".into(),
            description:
                "Write a text file, creating parent directories; replaces an existing file.".into(),
            parameters: path_schema(json!({"content": {"type": "string"}})),
        }
    }

    fn prepare(&self, ctx: &ToolContext, input: &Value) -> BoxFuture<Result<Prepared, String>> {
        let prepared = string_arg(input, "path").and_then(|path| {
            let content = string_arg(input, "content")?.to_string();
            let path = ctx.resolve(path);
            Ok(blocking(move || {
                if let Some(parent) = path.parent()
                    && let Err(e) = std::fs::create_dir_all(parent)
                {
                    return ToolOutput::Failed(format!("cannot create {}: {e}", parent.display()));
                }
                match std::fs::write(&path, content.as_bytes()) {
                    Ok(()) => ToolOutput::Completed {
                        output: format!("wrote {} bytes to {}", content.len(), path.display()),
                        structured: Some(json!({"bytes": content.len()})),
                    },
                    Err(e) => ToolOutput::Failed(format!("cannot write {}: {e}", path.display())),
                }
            }))
        });
        Box::pin(async move { prepared })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ToolsConfig;
    use crate::tools::StopSignals;
    use pretty_assertions::assert_eq;

    async fn call(tool: &dyn Tool, ctx: &ToolContext, input: Value) -> ToolOutput {
        match tool.prepare(ctx, &input).await {
            Ok(prepared) => prepared.run(StopSignals::default()).await,
            Err(e) => ToolOutput::Failed(e),
        }
    }

    #[tokio::test]
    async fn files_are_written_read_and_listed_relative_to_the_session() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext {
            directory: dir.path().to_path_buf(),
            config: ToolsConfig::default(),
        };
        let wrote = call(
            &WriteFile,
            &ctx,
            json!({"path": "sub/a.txt", "content": "hello"}),
        )
        .await;
        assert!(matches!(wrote, ToolOutput::Completed { .. }), "{wrote:?}");
        let read = call(&ReadFile, &ctx, json!({"path": "sub/a.txt"})).await;
        assert_eq!(
            read,
            ToolOutput::Completed {
                output: "hello".into(),
                structured: Some(json!({"bytes": 5, "truncated": false})),
            }
        );
        let listed = call(&ListDir, &ctx, json!({"path": "."})).await;
        assert_eq!(
            listed,
            ToolOutput::Completed {
                output: "sub/".into(),
                structured: Some(json!({"entries": 1})),
            }
        );
        let missing = call(&ReadFile, &ctx, json!({"path": "nope"})).await;
        assert!(matches!(missing, ToolOutput::Failed(m) if m.contains("cannot read")));
        let bad = call(&ReadFile, &ctx, json!({"file": "x"})).await;
        assert_eq!(
            bad,
            ToolOutput::Failed("invalid arguments: `path` (a string) is required".into())
        );
    }
}
