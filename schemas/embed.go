// Package schemas embeds the JSON Schemas documented in this folder, so the code validates against the very files
// users read.
package schemas

import _ "embed"

// PipelineSchema is pipeline.schema.json.
//
//go:embed pipeline.schema.json
var PipelineSchema []byte
