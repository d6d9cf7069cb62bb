//! The JSON Schema of pipeline files, generated from [`crate::raw::RawPipeline`].

use schemars::generate::SchemaSettings;

use crate::raw::RawPipeline;

/// The pipeline JSON Schema (draft-07, which editors' YAML servers support best).
pub fn pipeline_schema() -> serde_json::Value {
    let generator = SchemaSettings::draft07().into_generator();
    let schema = generator.into_root_schema_for::<RawPipeline>();
    serde_json::to_value(schema).unwrap_or_default()
}

/// The schema as the pretty JSON committed at `schema/pipeline.schema.json`.
pub fn pipeline_schema_json() -> String {
    let mut text = serde_json::to_string_pretty(&pipeline_schema()).unwrap_or_default();
    text.push('\n');
    text
}
