#!/bin/sh
# Builds the project into /tmp/tally-build and runs its JUnit tests offline with JUnit's console launcher
# (Debian's junit5 package; Maven needs plugins that are not installed here). Arguments: test files,
# folders or FILE::method ids; none runs every test.
set -e
junit=/usr/share/java/junit-platform-console-standalone.jar
out=/tmp/tally-build
rm -rf "$out"
mkdir -p "$out/classes" "$out/test-classes"
find src/main/java -name '*.java' > "$out/main-sources"
javac -proc:none -nowarn -encoding UTF-8 -d "$out/classes" "@$out/main-sources"
find src/test/java -name '*.java' > "$out/test-sources"
javac -proc:none -nowarn -encoding UTF-8 -cp "$out/classes:$junit" -d "$out/test-classes" "@$out/test-sources"
selectors=""
for arg in "$@"; do
    file=${arg%%::*}
    name=${file%/}
    name=${name#src/test/java}
    name=$(printf %s "${name#/}" | sed 's/\.java$//' | tr / .)
    if [ -d "$file" ]; then
        selectors="$selectors --select-package=$name"
    elif [ "$file" = "$arg" ]; then
        selectors="$selectors --select-class=$name"
    else
        selectors="$selectors --select-method=$name#${arg#*::}"
    fi
done
exec java -jar "$junit" --disable-banner --disable-ansi-colors --details=tree \
    -cp "$out/test-classes:$out/classes" ${selectors:---scan-classpath}
