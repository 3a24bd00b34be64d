#!/usr/bin/env bash
# Packs what the page needs on the lent H200 beyond its own image (Gradio, plotly and their missing dependencies,
# for its Python 3.12) into .device/page-site.tar.xz, next to TileLang's pack; both travel with carry [".device"].
# Trimmed to fit the 64 MiB a call may carry: Gradio's in-browser ffmpeg and bokeh, its SSR node build and demo
# media, and plotly's Jupyter extension are not used by the page.
set -euo pipefail
cd "$(dirname "$0")/../.."
wheels=$(mktemp -d); site=$(mktemp -d); trap 'rm -rf "$wheels" "$site"' EXIT
pins="gradio==6.31.0 gradio_client==2.7.2 plotly==7.1.0 fastapi==0.165.0 starlette==1.10.0 uvicorn==0.55.0
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 python-multipart==0.0.34
  safehttpx==0.1.7 semantic-version==2.10.0 tomlkit==0.14.0 groovy==0.1.2 orjson==3.13.0 pydub==0.25.1
  brotli==1.2.1 hf-gradio==0.4.1 pytz==2026.6 huggingface_hub==2.4.0 typer==0.29.2 annotated-doc==0.0.7
  httpx2==2.16.2 httpcore2==2.16.2 opentelemetry-api==1.45.2 truststore==0.10.5 tzdata==2026.6"
platforms=""
for p in manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 \
         manylinux_2_5 manylinux1; do platforms+=" --platform ${p}_x86_64"; done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
  -d "$wheels" $pins
for w in "$wheels"/*.whl; do python3 -m zipfile -e "$w" "$site"; done
rm -rf "$site"/gradio/templates/node "$site"/gradio/media_assets "$site"/gradio/templates/frontend/static/ffmpeg \
       "$site"/gradio/templates/frontend/static/bokeh "$site"/plotly/labextension
mkdir -p .device
tar -cf - -C "$site" . | xz -9 -T0 > .device/page-site.tar.xz
ls -la .device/page-site.tar.xz
