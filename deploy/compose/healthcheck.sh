#!/bin/bash
# sleipnir-healthcheck PORT PATH: succeeds when GET http://127.0.0.1:PORT/PATH answers 200. The compose file's health
# checks run it inside the image, which has bash but no curl or wget.
set -eu
exec 3<>"/dev/tcp/127.0.0.1/$1"
printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
read -r _ status _ <&3
[ "$status" = 200 ]
