#!/usr/bin/env bash
# Regenerates the failure-output corpus by running real tools on broken inputs.
# Each case writes corpus/CATEGORY/NAME.txt with what the tool printed (stdout and stderr).
# CATEGORY is the failure-pattern id the output must be classified as, or `none` for
# successful output. Tools that are not installed are skipped with a message.
# Used once to produce the committed files; the tests read the files, not the tools.
set -u
out="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

have() { command -v "$1" >/dev/null 2>&1 || { echo "skip: $1 not installed" >&2; return 1; }; }
# case CATEGORY NAME COMMAND...: run in a fresh folder prepared by the caller.
case_() {
  local category=$1 name=$2; shift 2
  mkdir -p "$out/$category"
  ( "$@" ) > "$out/$category/$name.txt" 2>&1 || true
  # Absolute temp paths vary run to run; keep them stable.
  sed -i "s#$work#/work#g" "$out/$category/$name.txt"
}

# ---- Rust ----
if have cargo; then
  cargo new -q rs && cd rs
  cat > src/main.rs <<'EOF'
fn main() {
    let x: i32 = "five";
    println!("{x}");
}
EOF
  case_ type-error rustc-mismatched-types cargo build --color never
  cat > src/main.rs <<'EOF'
fn main() {
    println!("{}", undefined_value);
}
EOF
  case_ undefined-name rustc-cannot-find-value cargo build --color never
  cat > src/main.rs <<'EOF'
use serde::Deserialize;
fn main() {}
EOF
  case_ import-not-found rustc-unresolved-import cargo build --color never
  cat > src/main.rs <<'EOF'
fn main() {
    let v = vec![1, 2, 3;
}
EOF
  case_ syntax-error rustc-unclosed-delimiter cargo build --color never
  cat > src/main.rs <<'EOF'
fn add(a: i32, b: i32) -> i32 { a - b }
fn main() { println!("{}", add(2, 3)); }
#[cfg(test)]
mod tests {
    #[test]
    fn adds() { assert_eq!(super::add(2, 3), 5); }
}
EOF
  case_ test-failure cargo-test-assert cargo test --color never
  cat > src/main.rs <<'EOF'
fn main() {
    let v: Vec<i32> = Vec::new();
    println!("{}", v[3]);
}
EOF
  case_ runtime-error rust-panic-index cargo run --color never
  cat > src/main.rs <<'EOF'
fn main(){let x=1;println!("{}",x);}
EOF
  case_ format-error cargo-fmt-check cargo fmt --check
  cat > src/main.rs <<'EOF'
fn main() {
    let v = vec![1, 2, 3];
    if v.len() == 0 { println!("empty"); }
}
EOF
  case_ lint-error cargo-clippy-deny cargo clippy --color never -- -D warnings
  cat > src/main.rs <<'EOF'
fn main() { println!("ok"); }
EOF
  case_ none cargo-build-ok cargo build --color never
  case_ none cargo-test-ok cargo test --color never
  printf '[package]\nname = "rs"\nversion = "0.1.0"\nedition = "2021"\n[dependencies]\nserde = { version = "1", features = [\n' > Cargo.toml
  case_ config-error cargo-bad-manifest cargo build --color never
  cd "$work"
fi

# ---- Python ----
if have python3; then
  mkdir py && cd py
  printf 'def f():\n    return undefined_thing + 1\n\nf()\n' > name_error.py
  case_ undefined-name python-nameerror python3 name_error.py
  printf 'import requestz\n' > import_error.py
  case_ import-not-found python-modulenotfound python3 import_error.py
  printf 'def f(:\n    pass\n' > syntax_error.py
  case_ syntax-error python-syntaxerror python3 syntax_error.py
  printf 'def div(a, b):\n    return a / b\n\nprint(div(1, 0))\n' > zero.py
  case_ runtime-error python-zerodivision python3 zero.py
  printf 'x = [0] * (10**12)\n' > mem.py
  case_ out-of-memory python-memoryerror python3 mem.py
  printf 'import unittest\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(1 + 1, 3)\n\nunittest.main()\n' > ut.py
  case_ test-failure python-unittest-fail python3 ut.py
  if have pytest; then
    printf 'def add(a, b):\n    return a - b\n\ndef test_add():\n    assert add(2, 3) == 5\n' > test_calc.py
    case_ test-failure pytest-assert pytest -q -p no:cacheprovider test_calc.py
    printf 'def test_ok():\n    assert 1 + 1 == 2\n' > test_ok.py
    case_ none pytest-pass pytest -q -p no:cacheprovider test_ok.py
  fi
  if have mypy; then
    printf 'def f(x: int) -> str:\n    return x\n' > typed.py
    case_ type-error mypy-incompatible-return mypy --no-error-summary --cache-dir /dev/null typed.py
  fi
  if have ruff; then
    printf 'import os\n\ndef f():\n    return 1\n' > lint.py
    case_ lint-error ruff-unused-import ruff check --no-cache lint.py
  fi
  if have black; then
    printf 'x = {  "a":1 }\n' > fmt.py
    case_ format-error black-would-reformat black --check --diff fmt.py
  fi
  cd "$work"
fi

# ---- C ----
if have gcc; then
  mkdir c && cd c
  printf '#include <stdio.h>\nint main(void) { printf("%%d\\n", counter); return 0; }\n' > undeclared.c
  case_ undefined-name gcc-undeclared gcc -c undeclared.c
  printf 'int main(void) { int x = 1 return x; }\n' > syntax.c
  case_ syntax-error gcc-expected-semicolon gcc -c syntax.c
  printf 'int helper(void);\nint main(void) { return helper(); }\n' > link.c
  case_ build-error ld-undefined-reference gcc link.c -o link
  printf '#include "missing_header.h"\nint main(void) { return 0; }\n' > inc.c
  case_ import-not-found gcc-missing-header gcc -c inc.c
  printf 'all:\n\tgcc -o app app.c\n' > Makefile
  case_ build-error make-no-input-file make
  cd "$work"
fi

# ---- Java ----
if have javac; then
  mkdir java && cd java
  printf 'public class A { public static void main(String[] a) { System.out.println(count); } }\n' > A.java
  case_ undefined-name javac-cannot-find-symbol javac A.java
  printf 'public class B { public static void main(String[] a) { int x = "s"; } }\n' > B.java
  case_ type-error javac-incompatible-types javac B.java
  printf 'public class C { public static void main(String[] a) { int x = 1 } }\n' > C.java
  case_ syntax-error javac-expected-semicolon javac C.java
  cd "$work"
fi

# ---- JavaScript ----
if have node; then
  mkdir js && cd js
  printf 'console.log(notDefined + 1);\n' > ref.js
  case_ undefined-name node-referenceerror node ref.js
  printf 'const x = require("left-padz");\n' > req.js
  case_ import-not-found node-cannot-find-module node req.js
  printf 'function f( {\n' > syn.js
  case_ syntax-error node-syntaxerror node syn.js
  printf 'const test = require("node:test");\nconst assert = require("node:assert");\ntest("adds", () => { assert.strictEqual(1 + 1, 3); });\n' > t.test.js
  case_ test-failure node-test-fail node --test t.test.js
  printf 'const test = require("node:test");\nconst assert = require("node:assert");\ntest("adds", () => { assert.strictEqual(1 + 1, 2); });\n' > ok.test.js
  case_ none node-test-pass node --test ok.test.js
  cd "$work"
fi

# ---- More Python tools ----
if have python3; then
  mkdir py2 && cd py2
  if have flake8; then
    printf 'def f():\n    return undefined_name_here\n' > f8.py
    case_ undefined-name flake8-f821 flake8 f8.py
    printf 'import os\nx=1\n' > f8b.py
    case_ lint-error flake8-unused-import flake8 f8b.py
  fi
  if have pip; then
    case_ import-not-found pip-no-matching-distribution pip install --no-index --find-links /nonexistent no-such-package-loopwright-test
  fi
  cd "$work"
fi

# ---- TypeScript / JavaScript tools (npm packages in $NPM_TOOLS/node_modules/.bin) ----
tools="${NPM_TOOLS:-}/node_modules/.bin"
if [ -x "$tools/tsc" ]; then
  mkdir ts && cd ts
  printf 'const n: number = "five";\nexport {};\n' > types.ts
  case_ type-error tsc-ts2322 "$tools/tsc" --noEmit --pretty false types.ts
  printf 'console.log(notDeclaredAnywhere);\nexport {};\n' > names.ts
  case_ undefined-name tsc-ts2304 "$tools/tsc" --noEmit --pretty false names.ts
  printf 'import { x } from "./missing-module";\nconsole.log(x);\n' > mods.ts
  case_ import-not-found tsc-ts2307 "$tools/tsc" --noEmit --pretty false mods.ts
  printf 'const a = ;\n' > syn.ts
  case_ syntax-error tsc-ts1109 "$tools/tsc" --noEmit --pretty false syn.ts
  cd "$work"
else
  echo "skip: tsc not found (set NPM_TOOLS to a folder with typescript, eslint, prettier installed)" >&2
fi
if [ -x "$tools/eslint" ]; then
  mkdir es && cd es
  printf 'import js from "@eslint/js";\nexport default [js.configs.recommended];\n' > eslint.config.mjs
  ln -s "${NPM_TOOLS}/node_modules" node_modules
  printf 'const unused = 1;\nfunction f() { return 2; }\n' > bad.js
  case_ lint-error eslint-no-unused-vars "$tools/eslint" --no-color bad.js
  cd "$work"
fi
if [ -x "$tools/prettier" ]; then
  mkdir pr && cd pr
  printf 'const  x = {a:1,\n  b:2}\n' > ugly.js
  case_ format-error prettier-check "$tools/prettier" --check ugly.js
  cd "$work"
fi

# ---- C++ ----
if have g++; then
  mkdir cpp && cd cpp
  printf '#include <string>\nint main() { int x = std::string("a"); return x; }\n' > conv.cpp
  case_ type-error gxx-cannot-convert g++ -c conv.cpp
  printf 'int main() { return missing_function(); }\n' > undecl.cpp
  case_ undefined-name gxx-not-declared g++ -c undecl.cpp
  cd "$work"
fi

# ---- Go ----
if have go; then
  mkdir gomod && cd gomod
  export GOFLAGS=-mod=mod GOPROXY=off GOCACHE="$work/gocache" GOPATH="$work/gopath"
  printf 'module example.com/app\n\ngo 1.19\n' > go.mod
  printf 'package main\n\nfunc main() {\n\tprintln(total)\n}\n' > main.go
  case_ undefined-name go-undefined go build ./...
  printf 'package main\n\nfunc main() {\n\tvar n int = "five"\n\tprintln(n)\n}\n' > main.go
  case_ type-error go-cannot-use go build ./...
  printf 'package main\n\nimport "github.com/nobody/nothing"\n\nfunc main() { nothing.Run() }\n' > main.go
  case_ import-not-found go-no-module-provides go build ./...
  printf 'package main\n\nfunc main() {\n\tprintln("x"\n}\n' > main.go
  case_ syntax-error go-syntax go build ./...
  printf 'package main\n\nfunc Add(a, b int) int { return a - b }\n\nfunc main() {}\n' > main.go
  printf 'package main\n\nimport "testing"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatalf("Add(2, 3) = %%d, want 5", Add(2, 3))\n\t}\n}\n' > main_test.go
  case_ test-failure go-test-fail go test ./...
  printf 'package main\n\nfunc Add(a, b int) int { return a + b }\n\nfunc main() {}\n' > main.go
  case_ none go-test-ok go test ./...
  printf 'package main\n\nfunc main() {\n\tvar s []int\n\tprintln(s[3])\n}\n' > main.go
  rm -f main_test.go
  case_ runtime-error go-panic-index go run .
  cd "$work"
fi

# ---- Java: JUnit 4 (Debian package junit4) ----
junit="${JUNIT_JAR:-/usr/share/java/junit4.jar}:${HAMCREST_JAR:-/usr/share/java/hamcrest-core.jar}"
if have javac && have java && [ -f "${junit%%:*}" ]; then
  mkdir junit && cd junit
  printf 'public class Calc { public static int add(int a, int b) { return a - b; } }\n' > Calc.java
  printf 'import org.junit.Test;\nimport static org.junit.Assert.assertEquals;\npublic class CalcTest {\n  @Test public void adds() { assertEquals(5, Calc.add(2, 3)); }\n}\n' > CalcTest.java
  javac -cp "$junit:." Calc.java CalcTest.java
  case_ test-failure junit4-assertion java -cp "$junit:." org.junit.runner.JUnitCore CalcTest
  printf 'public class Calc { public static int add(int a, int b) { return a + b; } }\n' > Calc.java
  javac -cp "$junit:." Calc.java
  case_ none junit4-pass java -cp "$junit:." org.junit.runner.JUnitCore CalcTest
  printf 'import org.apache.commons.lang3.StringUtils;\npublic class Dep { }\n' > Dep.java
  case_ import-not-found javac-package-does-not-exist javac Dep.java
  cd "$work"
fi

# ---- C / C++ with clang ----
if have clang; then
  mkdir clang && cd clang
  printf 'int main(void) {\n  int x = "five";\n  return x;\n}\n' > t.c
  case_ type-error clang-incompatible-pointer clang -Werror=int-conversion -c t.c
  printf 'int main(void) {\n  return undefined_thing;\n}\n' > u.c
  case_ undefined-name clang-undeclared-identifier clang -c u.c
  printf '#include "missing_header.h"\nint main(void) { return 0; }\n' > m.c
  case_ import-not-found clang-file-not-found clang -c m.c
  printf 'int main(void) {\n  return 0\n}\n' > s.c
  case_ syntax-error clang-expected-semicolon clang -c s.c
  printf 'int helper(void);\nint main(void) { return helper(); }\n' > l.c
  case_ build-error clang-undefined-reference clang l.c -o l
  printf '#include <stdio.h>\nint main(void) { int unused; printf("ok\\n"); return 0; }\n' > w.c
  case_ none clang-warning-only clang -Wall w.c -o w
  cd "$work"
fi

# ---- jest / vitest (npm packages in $NPM_TOOLS/node_modules/.bin) ----
if [ -x "$tools/jest" ]; then
  mkdir jest && cd jest
  printf '{"name": "j", "version": "1.0.0"}\n' > package.json
  printf 'const add = (a, b) => a - b;\nmodule.exports = { add };\n' > calc.js
  printf 'const { add } = require("./calc");\ntest("adds", () => { expect(add(2, 3)).toBe(5); });\n' > calc.test.js
  case_ test-failure jest-expect-tobe "$tools/jest" --ci --colors=false
  printf 'const add = (a, b) => a + b;\nmodule.exports = { add };\n' > calc.js
  case_ none jest-pass "$tools/jest" --ci --colors=false
  cd "$work"
fi
if [ -x "$tools/vitest" ]; then
  mkdir vitest && cd vitest
  printf '{"name": "v", "version": "1.0.0", "type": "module"}\n' > package.json
  ln -s "${NPM_TOOLS}/node_modules" node_modules
  printf 'export const add = (a, b) => a - b;\n' > calc.js
  printf 'import { test, expect } from "vitest";\nimport { add } from "./calc.js";\ntest("adds", () => { expect(add(2, 3)).toBe(5); });\n' > calc.test.js
  case_ test-failure vitest-expected "$tools/vitest" run --color=false
  cd "$work"
fi

# ---- npm peer-dependency conflict (needs the npm registry) ----
if have npm; then
  mkdir npmconf && cd npmconf
  printf '{"name": "c", "version": "1.0.0", "dependencies": {"react": "18.2.0", "react-dom": "17.0.2"}}\n' > package.json
  case_ dependency-conflict npm-eresolve npm install --no-audit --no-fund --ignore-scripts --dry-run
  cd "$work"
fi

# ---- Real errors mixed with warnings ----
if have cargo; then
  cargo new -q rsm && cd rsm
  printf 'fn helper() -> i32 { 1 }\nfn main() {\n    let unused = 1;\n    let also_unused = 2;\n    let x: i32 = "five";\n    println!("{x}");\n}\n' > src/main.rs
  case_ type-error rustc-warnings-then-mismatched-types cargo build --color never
  cd "$work"
fi
if have gcc; then
  mkdir cm && cd cm
  printf '#include <stdio.h>\nint main(void) { int unused; int other; printf("%%d\\n", total); return 0; }\n' > m.c
  case_ undefined-name gcc-warnings-then-undeclared gcc -Wall -c m.c
  cd "$work"
fi

# ---- Successful output with warnings: must match nothing ----
if have cargo; then
  cargo new -q rsw && cd rsw
  printf 'fn main() {\n    let unused = 1;\n    println!("ok");\n}\n' > src/main.rs
  case_ none cargo-build-with-warnings cargo build --color never
  cd "$work"
fi
if have gcc; then
  mkdir cw && cd cw
  printf '#include <stdio.h>\nint main(void) { int unused; printf("ok\\n"); return 0; }\n' > w.c
  case_ none gcc-wall-warnings gcc -Wall -o w w.c
  cd "$work"
fi
if have pytest; then
  mkdir pw && cd pw
  printf 'import warnings\n\ndef test_ok():\n    warnings.warn("old API", DeprecationWarning)\n    assert True\n' > test_w.py
  case_ none pytest-pass-with-warnings pytest -q -p no:cacheprovider test_w.py
  cd "$work"
fi

# ---- Shell, files, network ----
case_ command-not-found sh-not-found sh -c 'frobnicate --all'
printf 'echo hi\n' > noexec.sh && chmod -x noexec.sh
case_ permission-error sh-permission-denied sh -c './noexec.sh'
case_ disk-full dd-no-space dd if=/dev/zero of=/dev/full bs=1k count=1
if have curl; then
  case_ network-error curl-connection-refused curl -sS http://127.0.0.1:9/
fi
if have pip; then
  case_ dependency-conflict pip-resolution-impossible pip install --dry-run "six==1.16.0" "six==1.15.0"
fi
if have curl && have python3; then
  # A local server that answers 429, as an API does when a client goes too fast.
  python3 - <<'EOF' &
import http.server, socketserver
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(429)
        self.send_header("Retry-After", "30")
        self.end_headers()
        self.wfile.write(b'{"error":{"type":"rate_limit_error","message":"Too many requests"}}')
    def log_message(self, *a):
        pass
with socketserver.TCPServer(("127.0.0.1", 18429), H) as s:
    s.handle_request()
EOF
  sleep 1
  case_ rate-limit curl-429 curl -sS -f http://127.0.0.1:18429/v1/messages
fi
case_ timeout timeout-kill sh -c 'timeout --verbose 1 sleep 5; echo "command timed out after 1s (exit $?)"'
case_ none sh-ok sh -c 'echo building; echo done'

# ---- git ----
if have git; then
  mkdir g && cd g && git init -q -b main && git config user.email t@e && git config user.name T
  echo base > f.txt && git add f.txt && git commit -qm base
  git checkout -qb other && echo theirs > f.txt && git commit -qam theirs
  git checkout -q main && echo ours > f.txt && git commit -qam ours
  case_ merge-conflict git-merge-conflict git merge other
  cd "$work" && mkdir notgit && cd notgit
  case_ git-error git-not-a-repository git log
  cd "$work"
fi
echo "corpus written to $out" >&2
