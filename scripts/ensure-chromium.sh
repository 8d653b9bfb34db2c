#!/usr/bin/env bash
# Makes sure Debian's chromium is installed for the browser tests (never a downloaded browser),
# with a Chinese font (fonts-wqy-zenhei) so the zh-CN screenshots show characters, not boxes.
# Idempotent and quiet: does nothing when both are there.
set -euo pipefail
have_cjk_font() { command -v fc-list >/dev/null 2>&1 && [ -n "$(fc-list :lang=zh 2>/dev/null)" ]; }
if [ -x /usr/bin/chromium ] && have_cjk_font; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "ensure-chromium: /usr/bin/chromium is missing and this user cannot install packages (no root, no sudo); install Debian's chromium package" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq chromium fonts-wqy-zenhei >/dev/null
if [ ! -x /usr/bin/chromium ]; then
  echo "ensure-chromium: installing chromium did not produce /usr/bin/chromium" >&2
  exit 1
fi
