# The third held-out set (issue 28): cases for the tools of corpus/third.txt, chosen before any
# change of that issue. Sourced by generate.sh (its helpers: case_, shc, fresh, put, have,
# $NOBODY, the servers on 18429/18430); `CORPUS_PART=third bash corpus/generate.sh` writes only
# these. Labelled by corpus/README.md's rules, never by what the classifier answers.
#
# Names differ from the first two splits' on purpose: the missing program is `zorbify`, the
# undefined variable `widget_count`, the undefined function `draw_chart`.

# ---- shells and utilities ----
eco=shell
if have fish; then
  fresh fish
  case_ command-not-found fish-unknown-command fish command fish -c 'zorbify --all'
  put bad.fish 'if test -n "$x"\n  echo yes\n'
  case_ syntax-error fish-missing-end fish syntax fish --no-execute bad.fish
  put ok.fish 'echo "checked 12 files: 0 errors, 0 warnings"\n'
  case_ none fish-ok-no-errors fish command fish ok.fish
fi
if have tcsh; then
  fresh tcsh
  case_ undefined-name tcsh-undefined-variable tcsh command tcsh -f -c 'echo $widget_count'
  case_ command-not-found tcsh-command-not-found tcsh command tcsh -f -c 'zorbify --all'
fi
if have mksh; then
  fresh mksh
  case_ undefined-name mksh-parameter-not-set mksh command mksh -c 'set -u; echo "$widget_count"'
  put bad.sh 'if true; then\n  echo yes\n'
  case_ syntax-error mksh-unexpected-eof mksh syntax mksh -n bad.sh
fi
if have yash; then
  fresh yash
  case_ command-not-found yash-no-such-command yash command yash -c 'zorbify --all'
  put run.sh 'echo hi\n'
  chmod 644 run.sh
  case_ permission-error yash-permission-denied yash command yash -c './run.sh'
fi
if have zstd; then
  fresh zstd
  put data.txt 'hello hello hello\n'
  shc disk-full zstd-dev-full zstd command 'zstd -q -c data.txt > /dev/full'
  put broken.zst 'not a zstd frame at all\n'
  case_ none zstd-test-ok zstd command sh -c 'zstd -q -f data.txt -o ok.zst && zstd -t ok.zst'
fi
if have 7zz; then
  # Debian's 7zip package names the program 7zz.
  fresh 7z
  put a.txt 'a\n'
  shc permission-error 7z-archive-permission-denied 7z command "chmod 755 . && $NOBODY 7zz a /root/out.7z a.txt"
  put notarchive.7z 'plain text\n'
  case_ config-error 7z-cannot-open-as-archive 7z command 7zz t notarchive.7z
fi
if have cpio; then
  fresh cpio
  shc permission-error cpio-cannot-open cpio command "chmod 755 . && echo /root/.profile | $NOBODY cpio -o > /dev/null"
fi
if have parallel; then
  fresh parallel
  case_ command-not-found parallel-job-command-not-found parallel command parallel --will-cite zorbify ::: a b
  case_ timeout parallel-job-timeout parallel command parallel --will-cite --timeout 1 sleep ::: 5
fi
if have m4; then
  fresh m4
  put bad.m4 'define(`greet'"'"', `hello'"'"'\n'
  case_ syntax-error m4-end-of-file-in-argument-list m4 build m4 bad.m4
  put inc.m4 'include(`missing.m4'"'"')\n'
  case_ import-not-found m4-cannot-open-include m4 build m4 inc.m4
fi
if have bc; then
  fresh bc
  shc runtime-error bc-divide-by-zero bc command "echo '1/0' | bc"
  shc syntax-error bc-parse-error bc command "echo '2 +* 3' | bc"
fi
if have ed; then
  fresh ed
  shc permission-error ed-cannot-open-output ed command "printf 'a\\nx\\n.\\nw /root/x.txt\\nq\\n' | $NOBODY ed -v"
fi
if have expect; then
  fresh expect
  put slow.exp 'set timeout 1\nspawn sleep 5\nexpect {\n  "ready" { exit 0 }\n  timeout { puts "timed out waiting for ready"; exit 1 }\n}\n'
  case_ timeout expect-timed-out expect test expect slow.exp
  put undef.exp 'puts $widget_count\n'
  case_ undefined-name expect-no-such-variable expect command expect undef.exp
fi
if have socat; then
  fresh socat
  case_ network-error socat-connection-refused socat command socat -T1 - TCP:127.0.0.1:9
fi
if have lftp; then
  fresh lftp
  case_ network-error lftp-connection-refused lftp command lftp -e 'set net:max-retries 1; set net:reconnect-interval-base 1; ls; bye' ftp://127.0.0.1:9
fi

# ---- languages and their runtimes ----
eco=c
if have tcc; then
  fresh tcc
  put main.c 'int main(void) {\n  int x = 1\n  return x;\n}\n'
  case_ syntax-error tcc-expected-semicolon tcc build tcc -c main.c
  put undef.c 'int main(void) {\n  return widget_count;\n}\n'
  case_ undefined-name tcc-undeclared tcc build tcc -c undef.c
  put inc.c '#include "missing_header.h"\nint main(void) { return 0; }\n'
  case_ import-not-found tcc-include-not-found tcc build tcc -c inc.c
fi
eco=scripting
if have sbcl; then
  fresh sbcl
  case_ undefined-name sbcl-unbound-variable sbcl command sbcl --noinform --non-interactive --no-userinit --eval '(print *widget-count*)'
  case_ runtime-error sbcl-division-by-zero sbcl command sbcl --noinform --non-interactive --no-userinit --eval '(print (/ 1 (length nil)))'
fi
if have swipl; then
  fresh swipl
  put app.pl ':- initialization(main).\nmain :- draw_chart(1), halt.\n'
  case_ undefined-name swipl-unknown-procedure swipl command swipl app.pl
  put bad.pl 'main :- X = (1 + , 2.\n'
  case_ syntax-error swipl-syntax-error swipl syntax swipl -g halt bad.pl
fi
if have elixir; then
  fresh elixir
  put app.exs 'IO.puts(DrawChart.render(1))\n'
  case_ undefined-name elixir-undefined-module-function elixir command elixir app.exs
  put div.exs 'n = String.length("")\nIO.puts(10 / n)\n'
  case_ runtime-error elixir-arithmetic-error elixir command elixir div.exs
  put bad.exs 'defmodule A do\n  def f(x), do: x +\nend\n'
  case_ syntax-error elixir-syntax-error elixir syntax elixir bad.exs
fi
if have gforth; then
  fresh gforth
  case_ undefined-name gforth-undefined-word gforth command gforth -e 'draw-chart bye'
fi
if have luajit; then
  fresh luajit
  put app.lua 'local cfg = nil\nprint(cfg.port)\n'
  case_ runtime-error luajit-index-nil luajit command luajit app.lua
  put mod.lua 'local m = require("widgetlib")\n'
  case_ import-not-found luajit-module-not-found luajit command luajit mod.lua
fi
if have raku; then
  fresh raku
  put app.raku 'say $widget-count;\n'
  case_ undefined-name raku-variable-not-declared raku command raku app.raku
  put mod.raku 'use Widget::Lib;\n'
  case_ import-not-found raku-could-not-find-module raku command raku mod.raku
fi
if have mawk; then
  fresh mawk
  case_ syntax-error mawk-syntax-error mawk command mawk '{ print $1 ' /dev/null
  case_ runtime-error mawk-printf-not-enough-arguments mawk command mawk 'BEGIN { printf("%d %d\n", 1) }'
fi

# ---- build and packaging ----
eco=build
if have autoconf; then
  fresh autoconf
  put configure.ac 'AC_INIT([app], [1.0])\nAC_CONFIG_SRCDIR([main.c])\nAC_OUTPUT(\n'
  case_ config-error autoconf-unexpected-end autoconf build autoconf
fi
if have pkgconf; then
  fresh pkgconf
  case_ build-error pkgconf-package-not-found pkgconf build pkgconf --cflags widgetlib-2.0
fi
eco=python
if have tox; then
  fresh tox
  put tox.ini '[tox]\nenvlist = py\nskipsdist = true\n[testenv]\ncommands = python -c "assert 1 + 1 == 3, \x27adds up\x27"\n'
  case_ test-failure tox-commands-failed tox test tox -q
  put bad/tox.ini '[tox\nenvlist = py\n'
  case_ config-error tox-ini-parse-error tox test tox -q -c bad/tox.ini
fi
if have hatch; then
  fresh hatch
  put pyproject.toml '[project]\nname = "app"\nversion = "0.1.0"\ndependencies = [\n'
  case_ config-error hatch-invalid-pyproject hatch build env HATCH_DATA_DIR="$work/hatch" hatch version
fi
if have pdm; then
  fresh pdm
  put pyproject.toml '[project]\nname = "app"\nversion = "0.1.0"\nrequires-python = ">=3.8"\ndependencies = ["requests>=2", "requests<1"]\n'
  case_ dependency-conflict pdm-resolution-impossible pdm build env PDM_HOME="$work/pdmhome" pdm lock --no-cross-platform -q
  put other/pyproject.toml '[project]\nname = "b"\nversion = "0.1.0"\ndependencies = ["leftpad-nothing"]\n'
  case_ network-error pdm-index-refused pdm build sh -c "cd other && PDM_HOME=$work/pdmhome2 PDM_PYPI_URL=http://127.0.0.1:9/simple pdm lock -q"
fi
eco=js
if have yarn; then
  fresh yarn
  put package.json '{"name": "app", "version": "1.0.0", "scripts": {"build": "zorbify --all"}}\n'
  case_ command-not-found yarn-script-command-not-found yarn build yarn run build
  put other/package.json '{"name": "b", "version": "1.0.0", "dependencies": {"left-pad": "1.3.0"}}\n'
  case_ network-error yarn-registry-refused yarn build sh -c "cd other && yarn install --registry http://127.0.0.1:9/ --network-timeout 2000 --non-interactive"
fi
if have pnpm; then
  fresh pnpm
  put package.json '{"name": "app", "version": "1.0.0", "dependencies": {"left-pad": "1.3.0"}}\n'
  case_ rate-limit pnpm-registry-429 pnpm build env npm_config_fetch_retries=0 pnpm install --registry http://127.0.0.1:18429/
fi
if have babel; then
  fresh babel
  put src/app.js 'const x = {a: 1,, b: 2};\n'
  case_ syntax-error babel-unexpected-token babel build babel src/app.js
fi
if have terser; then
  fresh terser
  put app.js 'function f( {\n  return 1;\n}\n'
  case_ syntax-error terser-parse-error terser build terser app.js -o out.js
  put ok.js 'function handleError(err) { console.error("error:", err); return 0; }\n'
  case_ none terser-ok terser build terser ok.js -o ok.min.js
fi
if have coffee; then
  fresh coffee
  put app.coffee 'square = (x) -> x *\n'
  case_ syntax-error coffee-unexpected-terminator coffee build coffee -c app.coffee
  put run.coffee 'console.log drawChart(1)\n'
  case_ undefined-name coffee-reference-error coffee command coffee run.coffee
fi

# ---- linters, formatters, checkers ----
eco=c
if have clang-tidy; then
  fresh clang-tidy
  put main.c 'int sign(int x) {\n  if (x < 0) return -1;\n  return 1;\n}\n'
  case_ lint-error clang-tidy-warnings-as-errors clang-tidy lint clang-tidy --checks='-*,readability-braces-around-statements' --warnings-as-errors='*' main.c --
  put undef.c 'int main(void) { return widget_count; }\n'
  case_ undefined-name clang-tidy-undeclared-identifier clang-tidy lint clang-tidy undef.c --
fi
if have cpplint; then
  fresh cpplint
  put app.cc 'int main() {  int x=1;return x;}\n'
  case_ lint-error cpplint-errors-found cpplint lint cpplint app.cc
fi
eco=python
if have vulture; then
  fresh vulture
  put app.py 'import os\n\ndef unused_helper():\n    return 1\n\nprint("hi")\n'
  case_ lint-error vulture-unused-code vulture lint vulture app.py
  put bad.py 'def f(:\n    pass\n'
  case_ syntax-error vulture-invalid-syntax vulture lint vulture bad.py
fi
if have pyupgrade; then
  fresh pyupgrade
  put app.py 'x = set([1, 2])\nprint("%%s" %% x)\n'
  case_ format-error pyupgrade-rewriting pyupgrade format pyupgrade --py38-plus app.py
fi
if have autoflake; then
  fresh autoflake
  put app.py 'import os\nimport sys\n\nprint(sys.argv)\n'
  case_ format-error autoflake-check-unused-imports autoflake format autoflake --check app.py
fi
if have proselint; then
  fresh proselint
  put README.md 'This is very unique and we will utilize it in order to leverage synergy.\n'
  case_ lint-error proselint-suggestions proselint lint proselint check README.md
fi
if have doc8; then
  fresh doc8
  put index.rst 'Title\n====\n\nA line that is very long indeed and goes on and on past the seventy-nine character limit of doc8.   \n'
  case_ lint-error doc8-violations doc8 lint doc8 index.rst
fi
eco=js
if have html-validate; then
  fresh html-validate
  put index.html '<!DOCTYPE html>\n<html lang="en"><head><title>t</title></head><body><div><p>unclosed</div></body></html>\n'
  case_ lint-error html-validate-errors html-validate lint html-validate index.html
fi
if have stylus; then
  fresh stylus
  put app.styl 'body\n  color: widget-color\n  margin: (10px +\n'
  case_ syntax-error stylus-parse-error stylus build stylus app.styl
  put imp.styl '@import "missing-theme"\nbody\n  color: red\n'
  case_ import-not-found stylus-failed-to-locate-import stylus build stylus imp.styl
fi
if have jsonlint; then
  fresh jsonlint
  put config.json '{"port": 8080, "host": "a",}\n'
  case_ config-error jsonlint-parse-error jsonlint lint jsonlint config.json
fi
eco=java
if have checkstyle; then
  fresh checkstyle
  put App.java 'public class App {\n  public static void main(String[] args) { int X_y=1; System.out.println(X_y); }\n}\n'
  put checks.xml '<?xml version="1.0"?>\n<!DOCTYPE module PUBLIC "-//Checkstyle//DTD Checkstyle Configuration 1.3//EN" "https://checkstyle.org/dtds/configuration_1_3.dtd">\n<module name="Checker">\n  <property name="severity" value="error"/>\n  <module name="TreeWalker">\n    <module name="LocalVariableName"/>\n  </module>\n</module>\n'
  case_ lint-error checkstyle-errors checkstyle lint checkstyle -c checks.xml App.java
  put bad.xml '<module name="Checker">\n  <module name="TreeWalker">\n</module>\n'
  case_ config-error checkstyle-bad-config checkstyle lint checkstyle -c bad.xml App.java
fi
eco=shell
if have xmlstarlet; then
  fresh xmlstarlet
  put pom.xml '<project><modelVersion>4.0.0</modelVersion><name>app</project>\n'
  case_ config-error xmlstarlet-not-well-formed xmlstarlet lint xmlstarlet val -e -w pom.xml
fi

# ---- test runners and analysers ----
eco=js
if have tape; then
  fresh tape
  put add.test.js 'const test = require("tape");\ntest("sum", t => {\n  t.equal(2 + 2, 5, "two and two");\n  t.end();\n});\n'
  case_ test-failure tape-not-ok tape test env NODE_PATH="$T/node_modules" node add.test.js
fi
if have uvu; then
  fresh uvu
  put tests/sum.test.mjs 'import { test } from "uvu";\nimport * as assert from "uvu/assert";\ntest("sum", () => { assert.is(2 + 2, 5); });\ntest.run();\n'
  ln -s "$T/node_modules" node_modules
  case_ test-failure uvu-assertion uvu test uvu tests
fi
eco=c
if have valgrind; then
  fresh valgrind
  put leak.c '#include <stdlib.h>\n#include <string.h>\nint main(void) {\n  char *p = malloc(4);\n  strcpy(p, "too long");\n  return 0;\n}\n'
  if cc -g -o leak leak.c 2>/dev/null; then
    case_ runtime-error valgrind-invalid-write valgrind test valgrind --error-exitcode=1 -q ./leak
  fi
fi

# ---- version control ----
eco=vcs
if have darcs; then
  fresh darcs
  case_ git-error darcs-not-a-repository darcs command darcs log
fi
if have cvs; then
  fresh cvs
  case_ git-error cvs-no-cvsroot cvs command env -u CVSROOT cvs status
fi
if have quilt; then
  fresh quilt
  put a.txt 'one\ntwo\nthree\n'
  mkdir -p patches
  put patches/fix.diff '--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-TWO\n+2\n three\n'
  put patches/series 'fix.diff\n'
  case_ merge-conflict quilt-patch-does-not-apply quilt command quilt push -a
fi
if have wiggle; then
  fresh wiggle
  put f.txt 'alpha\nbeta\ngamma\n'
  put f.rej '@@ -1,3 +1,3 @@\n alpha\n-BETA\n+b\n gamma\n'
  case_ merge-conflict wiggle-unresolved-conflicts wiggle command wiggle --replace f.txt f.rej
fi

# ---- data and documents ----
eco=build
if have protoc; then
  fresh protoc
  put app.proto 'syntax = "proto3";\nmessage Widget {\n  int32 id = 1\n}\n'
  case_ syntax-error protoc-expected-semicolon protoc build protoc --cpp_out=. app.proto
  put imp.proto 'syntax = "proto3";\nimport "missing/common.proto";\n'
  case_ import-not-found protoc-import-not-found protoc build protoc --cpp_out=. imp.proto
fi
if have dot; then
  fresh dot
  put g.dot 'digraph G {\n  a -> b\n  b -> \n}\n'
  case_ syntax-error dot-syntax-error dot build dot -Tsvg g.dot -o g.svg
  put ok.dot 'digraph G { error -> handled; }\n'
  case_ none dot-ok dot build dot -Tsvg ok.dot -o ok.svg
fi
