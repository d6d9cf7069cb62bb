# Tools added to the tuned ones (issue 28): more tools for the statistical classifier to learn
# from, of every ecosystem, none of them held out (corpus/tuned4.txt lists them). Sourced by
# generate.sh (its helpers); `CORPUS_PART=tuned4 bash corpus/generate.sh` writes only these.
#
# Names vary from case to case on purpose (a name repeated across a category's cases is learnt
# as the category; see the trainer's PLACEHOLDERS).

# ---- languages and their runtimes ----
eco=scripting
if have clisp; then
  fresh clisp
  case_ undefined-name clisp-variable-has-no-value clisp command clisp -q -x '(print *max-items*)'
  case_ runtime-error clisp-division-by-zero clisp command clisp -q -x '(/ 10 (- 3 3))'
fi
if have gprolog; then
  fresh gprolog
  put app.pl 'main :- total_price(3, X), write(X), nl.\n'
  case_ undefined-name gprolog-existence-error gprolog command gprolog --consult-file app.pl --entry-goal main --entry-goal halt
  put bad.pl 'greet(X) :- write(X.\n'
  case_ syntax-error gprolog-syntax-error gprolog syntax gprolog --consult-file bad.pl --entry-goal halt
fi
if have fpc; then
  fresh fpc
  put app.pas 'program App;\nbegin\n  writeln(itemCount)\nend.\n'
  case_ undefined-name fpc-identifier-not-found fpc build fpc -v0e app.pas
  put types.pas "program Types;\nvar n: integer;\nbegin\n  n := 'twelve';\n  writeln(n)\nend.\n"
  case_ type-error fpc-incompatible-types fpc build fpc -v0e types.pas
  put semi.pas 'program Semi;\nbegin\n  writeln(1)\n  writeln(2)\nend.\n'
  case_ syntax-error fpc-expected-semicolon fpc build fpc -v0e semi.pas
fi
if have nim; then
  fresh nim
  put app.nim 'echo totalCount\n'
  case_ undefined-name nim-undeclared-identifier nim build nim c --hints:off --nimcache:"$work/nimcache" app.nim
  put types.nim 'var port: int = "8080"\necho port\n'
  case_ type-error nim-type-mismatch nim build nim c --hints:off --nimcache:"$work/nimcache2" types.nim
  put imp.nim 'import yamlparser\n'
  case_ import-not-found nim-cannot-open-file nim build nim c --hints:off --nimcache:"$work/nimcache3" imp.nim
fi
if have csi; then
  fresh chicken
  put app.scm '(display (sum-of-squares 3 4))\n'
  case_ undefined-name chicken-unbound-variable csi command csi -s app.scm
  put bad.scm '(define (f x)\n  (+ x 1)\n'
  case_ syntax-error chicken-unterminated-list csi syntax csi -s bad.scm
fi
if have newlisp; then
  fresh newlisp
  case_ runtime-error newlisp-division-by-zero newlisp command newlisp -e '(/ 8 (- 2 2))'
fi
if have mruby; then
  fresh mruby
  case_ undefined-name mruby-undefined-method mruby command mruby -e 'puts format_report(3)'
  case_ runtime-error mruby-zero-division mruby command mruby -e 'n = 0; puts 10 / n'
fi
if have cobc; then
  fresh cobol
  put app.cob '       IDENTIFICATION DIVISION.\n       PROGRAM-ID. APP.\n       PROCEDURE DIVISION.\n           DISPLAY "HELLO"\n           MOVE 1 TO.\n           STOP RUN.\n'
  case_ syntax-error cobc-syntax-error cobc build cobc -x app.cob
fi
if have pypy3; then
  fresh pypy3
  put app.py 'import csvkit_missing\n'
  case_ import-not-found pypy3-no-module-named pypy3 command pypy3 app.py
  put types.py 'def total(items):\n    return sum(items)\n\nprint(total(["a", "b"]))\n'
  case_ runtime-error pypy3-typeerror pypy3 command pypy3 types.py
fi
if have groovy; then
  fresh groovy
  # Debian's groovy looks for default-java, which a machine with several JDKs may lack.
  [ -d /usr/lib/jvm/default-java ] || export JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
  put app.groovy 'println(orderTotal * 2)\n'
  case_ undefined-name groovy-missing-property groovy command groovy app.groovy
  put bad.groovy 'def f(x) {\n  return x +\n}\n'
  case_ syntax-error groovy-unexpected-token groovy syntax groovy bad.groovy
fi
if have Rscript; then
  fresh r
  case_ undefined-name r-object-not-found Rscript command Rscript -e 'print(total_rows + 1)'
  case_ import-not-found r-no-package-called Rscript command Rscript -e 'library(tidywidgets)'
  case_ runtime-error r-stop-called Rscript command Rscript -e 'check <- function(x) if (x < 0) stop("negative input not allowed"); check(-1)'
fi
eco=c
if have sassc; then
  fresh sassc
  put app.scss '.a {\n  color: red\n  .b { color: blue; }\n'
  case_ syntax-error sassc-invalid-css sassc build sassc app.scss
  put imp.scss '@import "missing-partial";\n.a { color: red; }\n'
  case_ import-not-found sassc-file-to-import-not-found sassc build sassc imp.scss
fi

# ---- linters and formatters ----
if have rubocop; then
  fresh rubocop
  put app.rb "def Total( a,b )\n  return a+b\nend\n"
  case_ lint-error rubocop-offenses rubocop lint rubocop --no-color --cache false app.rb
  put .rubocop.yml 'AllCops:\n  TargetRubyVersion: [2.7\n'
  case_ config-error rubocop-bad-config rubocop lint rubocop --no-color --cache false app.rb
fi
eco=scripting
if have perltidy; then
  fresh perltidy
  put app.pl 'my $x=1;if($x){print "yes\\n";}\n'
  case_ format-error perltidy-assert-tidy perltidy format perltidy --assert-tidy -st app.pl
fi
if have perlcritic; then
  fresh perlcritic
  put app.pl 'open(FH, "data.txt");\nmy $line = <FH>;\nprint $line;\n'
  case_ lint-error perlcritic-violations perlcritic lint perlcritic --severity 3 app.pl
fi
if have phpcs; then
  fresh phpcs
  put app.php '<?php\nfunction total($a,$b){ return $a+$b; }\n'
  case_ lint-error phpcs-psr12 phpcs lint phpcs --standard=PSR12 --no-colors app.php
fi
eco=c
if have flawfinder; then
  fresh flawfinder
  put main.c '#include <string.h>\nvoid copy(char *dst, const char *src) { strcpy(dst, src); }\n'
  case_ lint-error flawfinder-hits flawfinder lint flawfinder --error-level=1 --quiet main.c
fi
if have splint; then
  fresh splint
  put main.c '#include <stdio.h>\nint main(void) {\n  int count;\n  printf("%%d\\n", count);\n  return 0;\n}\n'
  case_ lint-error splint-warnings splint lint splint main.c
fi
eco=python
if have pylama; then
  fresh pylama
  put app.py 'import os, sys\ndef f( x ):\n  return x\n'
  case_ lint-error pylama-errors pylama lint pylama app.py
fi
if have darglint; then
  fresh darglint
  put app.py 'def scale(value, factor):\n    """Scale a value.\n\n    Args:\n        value: The value.\n\n    Returns:\n        The scaled value.\n\n    """\n    return value * factor\n'
  case_ lint-error darglint-missing-parameter darglint lint darglint app.py
fi
if have interrogate; then
  fresh interrogate
  put pkg/mod.py 'def a():\n    pass\n\n\ndef b():\n    pass\n'
  case_ lint-error interrogate-coverage-failed interrogate lint interrogate --fail-under 80 pkg
fi
if have rstcheck; then
  fresh rstcheck
  put README.rst 'Title\n=====\n\n.. code-block:: python\n\n    def f(:\n        pass\n'
  case_ lint-error rstcheck-errors rstcheck lint rstcheck README.rst
fi
if have toml-sort; then
  fresh toml-sort
  put pyproject.toml '[tool.b]\nx = 1\n\n[tool.a]\ny = 2\n'
  case_ format-error toml-sort-check toml-sort format toml-sort --check pyproject.toml
  put bad.toml '[tool\nx = 1\n'
  case_ config-error toml-sort-invalid-toml toml-sort format toml-sort --check bad.toml
fi
if have yamlfix; then
  fresh yamlfix
  put config.yml 'key:   value\nlist:\n- a\n-   b\n'
  case_ format-error yamlfix-check yamlfix format yamlfix --check config.yml
fi
if have robot; then
  fresh robot
  put tests.robot '*** Test Cases ***\nAddition Works\n    Should Be Equal As Integers    ${2+2}    5\n'
  case_ test-failure robot-test-failed robot test robot --output NONE --report NONE --log NONE tests.robot
fi
if have nox; then
  fresh nox
  put noxfile.py 'import nox\n\n@nox.session(python=False)\ndef tests(session):\n    session.run("python3", "-c", "import sys; sys.exit(\x27expected 4 orders, found 3\x27)")\n'
  case_ test-failure nox-session-failed nox test nox --no-color
  put other/readme.txt 'no noxfile here\n'
  case_ config-error nox-no-noxfile nox test sh -c 'cd other && nox --no-color'
fi
if have flit; then
  fresh flit
  put pyproject.toml '[build-system]\nrequires = ["flit_core"]\nbuild-backend = "flit_core.buildapi"\n\n[project]\nname = "app"\ndynamic = ["version", "description"]\n'
  put app/__init__.py 'x = 1\n'
  case_ config-error flit-no-docstring-version flit build flit build --no-use-vcs
fi
if have mkdocs; then
  fresh mkdocs
  put mkdocs.yml 'site_name: app\ntheme:\n  name: materialx\n'
  put docs/index.md '# Home\n'
  case_ config-error mkdocs-unrecognised-theme mkdocs build mkdocs build --strict -q
fi
if have django-admin; then
  fresh django
  case_ import-not-found django-settings-module-missing django-admin command django-admin check --settings=shopsite.settings_prod
fi

# ---- JavaScript tools ----
eco=js
if have ajv; then
  fresh ajv
  put schema.json '{"type": "object", "properties": {"port": {"type": "integer"}}, "required": ["port"]}\n'
  put config.json '{"port": "eighty"}\n'
  case_ config-error ajv-data-invalid ajv lint ajv validate -s schema.json -d config.json
fi
if have remark; then
  fresh remark
  put .remarkrc.json '{"plugins": []}\n'
  put README.md '# Title\n\n[link][missing-ref]\n'
  ln -s "$T/node_modules" node_modules
  case_ lint-error remark-frail-warnings remark lint remark --frail --use remark-preset-lint-recommended README.md
fi
if have cspell; then
  fresh cspell
  put notes.md 'The configuraton is recieved from the servr.\n'
  case_ lint-error cspell-unknown-words cspell lint cspell --no-progress --no-color notes.md
fi
if have qunit; then
  fresh qunit
  put test/sum.js 'QUnit.test("sum", assert => {\n  assert.equal(2 + 2, 5, "two and two");\n});\n'
  case_ test-failure qunit-failed-assertion qunit test qunit test/sum.js
fi
if have solcjs; then
  fresh solc
  put Token.sol '// SPDX-License-Identifier: MIT\npragma solidity >=0.8.0;\ncontract Token {\n  function supply() public pure returns (uint256) {\n    uint256 x = "many";\n    return x;\n  }\n}\n'
  case_ type-error solc-type-not-convertible solcjs build solcjs --bin Token.sol
  put Vault.sol '// SPDX-License-Identifier: MIT\npragma solidity >=0.8.0;\ncontract Vault {\n  function f() public pure returns (uint256) {\n    return ownerBalance;\n  }\n}\n'
  case_ undefined-name solc-undeclared-identifier solcjs build solcjs --bin Vault.sol
fi
if have handlebars; then
  fresh handlebars
  put page.hbs '<h1>{{title}</h1>\n'
  case_ syntax-error handlebars-parse-error handlebars build handlebars page.hbs -f page.js
fi
if have svgo; then
  fresh svgo
  put logo.svg '<svg xmlns="http://www.w3.org/2000/svg"><rect width="10" height="10"</svg>\n'
  case_ config-error svgo-invalid-svg svgo build svgo logo.svg -o out.svg
fi
if have webpack; then
  fresh webpack
  put src/index.js 'import { render } from "./widgets/render";\nrender();\n'
  case_ import-not-found webpack-module-not-found webpack build webpack --mode production --no-stats-colors
fi
if have write-good; then
  fresh write-good
  put README.md 'It was decided that the config is very simply loaded.\n'
  case_ lint-error write-good-suggestions write-good lint write-good README.md
fi
