#!/usr/bin/env bash
# Installs what `make run` or `make test` needs and is missing, saying what
# and why; with everything there it prints nothing and takes milliseconds,
# so the Makefile calls it every time.
#
#   scripts/setup.sh run    PostgreSQL server programs, libvips (headers,
#                           pkg-config, gcc, make), poppler and tesseract:
#                           building and running the orchestrator and its
#                           workers
#   scripts/setup.sh test   all of run, plus the vips command-line tools,
#                           Chromium, and curl, jq and the AWS CLI (the
#                           commands of the docs, which e2e's TestDocs
#                           runs): the tests and make bench
#
# Debian/Ubuntu: apt-get, as root or through sudo when sudo needs no
# password. macOS: Homebrew. Otherwise it prints the command to run and exits
# non-zero.
set -euo pipefail

level=${1:-}
if [[ "$level" != run && "$level" != test ]]; then
  echo "usage: $0 run|test" >&2
  exit 2
fi

need=()    # packages to install
why=()     # one line per package: what needs it
want() { need+=("$1"); why+=("  $1: $2"); }

has_initdb() {
  command -v initdb >/dev/null 2>&1 && return 0
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && return 0
  compgen -G '/opt/homebrew/opt/postgresql@*/bin/initdb' >/dev/null && return 0
  compgen -G '/usr/local/opt/postgresql@*/bin/initdb' >/dev/null && return 0
  return 1
}

if ! command -v go >/dev/null 2>&1; then
  echo "setup: Go is not installed: the orchestrator needs Go 1.26 or newer (https://go.dev/dl/), on PATH" >&2
  exit 1
fi

case "$(uname -s)" in
Darwin)
  has_initdb || want postgresql@16 "initdb and pg_ctl, for the local PostgreSQL cluster of make run and make test"
  command -v pkg-config >/dev/null 2>&1 || want pkg-config "finds libvips for the workers' cgo build"
  pkg-config --exists vips 2>/dev/null || want vips "libvips, which the workers use through cgo (and its command-line tools, for the tests)"
  command -v pdftotext >/dev/null 2>&1 || want poppler "pdfinfo and pdftotext, for the PDF worker"
  command -v tesseract >/dev/null 2>&1 || want tesseract "the local OCR engine (with English data) of make run, used when no OCR_API_URL is set"
  if [[ "$level" == test ]] && ! command -v chromium >/dev/null 2>&1 && [[ ! -d /Applications/Chromium.app ]]; then
    want chromium "headless Chromium, for the dashboard's browser test (installed with --cask)"
  fi
  if [[ "$level" == test ]]; then
    command -v jq >/dev/null 2>&1 || want jq "jq, which the commands of the docs use (TestDocs runs them)"
    command -v aws >/dev/null 2>&1 || want awscli "the AWS CLI, the S3 client of the docs' commands (TestDocs runs them)"
  fi
  if ! command -v cc >/dev/null 2>&1; then
    echo "setup: no C compiler: run \`xcode-select --install\` (cgo builds the workers), then try again" >&2
    exit 1
  fi
  [[ ${#need[@]} -eq 0 ]] && exit 0
  echo "setup: missing for make $level, to be installed with Homebrew:" >&2
  printf '%s\n' "${why[@]}" >&2
  if ! command -v brew >/dev/null 2>&1; then
    echo "setup: Homebrew is not installed (https://brew.sh). Then run: brew install ${need[*]}" >&2
    exit 1
  fi
  for p in "${need[@]}"; do
    if [[ "$p" == chromium ]]; then brew install --cask chromium; else brew install "$p"; fi
  done
  exit 0
  ;;
esac

# Debian, Ubuntu and their kin.
has_initdb || want postgresql "initdb and pg_ctl, for the local PostgreSQL cluster of make run and make test"
# As root the cluster runs as the postgres user (initdb refuses root), which
# the postgresql package creates.
if [[ $(id -u) -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
  [[ " ${need[*]} " == *" postgresql "* ]] || want postgresql "its postgres user, who owns the local clusters when you are root"
fi
command -v make >/dev/null 2>&1 || want make "runs the Makefile"
command -v gcc >/dev/null 2>&1 || want gcc "cgo compiles the workers' libvips binding"
command -v pkg-config >/dev/null 2>&1 || want pkg-config "finds libvips for the workers' cgo build"
if ! pkg-config --exists vips 2>/dev/null; then
  want libvips-dev "libvips and its headers: the workers convert images through cgo"
fi
command -v pdfinfo >/dev/null 2>&1 && command -v pdftotext >/dev/null 2>&1 ||
  want poppler-utils "pdfinfo and pdftotext, for the PDF worker"
if ! command -v tesseract >/dev/null 2>&1; then
  want tesseract-ocr "tesseract and its English data: the local OCR engine of make run, used when no OCR_API_URL is set"
elif ! tesseract --list-langs 2>/dev/null | grep -qx eng; then
  want tesseract-ocr-eng "tesseract's English data, for the local OCR engine"
fi
if [[ "$level" == test ]]; then
  command -v vipsthumbnail >/dev/null 2>&1 ||
    want libvips-tools "the vips command-line tools, which the tests and make bench compare the workers with"
  if [[ ! -x /usr/bin/chromium ]]; then
    want chromium "headless Chromium at /usr/bin/chromium, for the dashboard's browser test"
    want fonts-liberation "fonts for the pages Chromium renders"
  fi
  command -v curl >/dev/null 2>&1 || want curl "curl, which the commands of the docs use (TestDocs runs them)"
  command -v jq >/dev/null 2>&1 || want jq "jq, which the commands of the docs use (TestDocs runs them)"
  command -v aws >/dev/null 2>&1 || want awscli "the AWS CLI, the S3 client of the docs' commands (TestDocs runs them)"
fi
[[ ${#need[@]} -eq 0 ]] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: missing, and no apt-get or Homebrew to install it with:" >&2
  printf '%s\n' "${why[@]}" >&2
  echo "setup: install the equivalents with your package manager, then try again (see README.md, Quick start)" >&2
  exit 1
fi

echo "setup: missing for make $level:" >&2
printf '%s\n' "${why[@]}" >&2
apt=(apt-get -o DPkg::Lock::Timeout=600)
if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "setup: installing needs root, and sudo is not available without a password. Run, as root:" >&2
  echo "  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${need[*]}" >&2
  echo "then run make again." >&2
  exit 1
fi
echo "setup: installing them: ${sudo[*]:+${sudo[*]} }apt-get update && apt-get install -y --no-install-recommends ${need[*]}" >&2
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive "${apt[@]}" update -q >&2
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -q --no-install-recommends "${need[@]}" >&2
echo "setup: installed ${need[*]}" >&2
