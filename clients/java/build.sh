#!/usr/bin/env bash
# clients/java/build.sh — builds and tests the Spring library with javac and
# the jars of Debian's packages in /usr/share/java (no Maven repository).
#
#   build.sh jar                         build/idempotency-spring.jar
#   build.sh test JDBC_URL               the JUnit 5 suite (console launcher)
#   build.sh bench JDBC_URL REDIS_PORT   the duplicate-storm benchmark row
#
# The Debian packages: libspring-{aop,jdbc,transaction,context,test}-java,
# libaspectj-java, libjackson2-databind-java, libpostgresql-jdbc-java,
# libhikaricp-java, junit5, default-jdk-headless (scripts/cluster.sh's
# JAVA_PACKAGES; scripts/test.sh installs them).
set -euo pipefail
cd "$(dirname "$0")"
J=/usr/share/java

# Spring 4.3 is packaged as spring3-*.jar (the jar names predate 4.x)
MAIN_CP=$(printf "$J/%s.jar:" spring3-core spring3-beans spring3-context spring3-expression \
    spring3-aop spring3-jdbc spring3-transaction aspectjweaver aopalliance commons-logging \
    jackson-core jackson-databind jackson-annotations)
TEST_CP=$MAIN_CP$(printf "$J/%s.jar:" spring3-test postgresql HikariCP slf4j-api slf4j-nop \
    junit-platform-console-standalone)
# Java 8 bytecode: Spring 4.3's class reading and generation predate newer formats
JAVAC=(javac --release 8 -encoding UTF-8 -parameters -Xlint:all,-options,-processing,-path -Werror)
# Spring 4.3's CGLIB (for @Configuration classes) defines classes through
# ClassLoader.defineClass, which Java 17 opens only on request
JAVA=(java --add-opens java.base/java.lang=ALL-UNNAMED)

compile_main() {
    rm -rf build/main && mkdir -p build/main
    "${JAVAC[@]}" -cp "$MAIN_CP" -d build/main $(find src/main/java -name '*.java')
    jar --create --file build/idempotency-spring.jar -C build/main .
}

compile_test() {
    compile_main
    rm -rf build/test && mkdir -p build/test
    "${JAVAC[@]}" -cp "build/main:$TEST_CP" -d build/test $(find src/test/java -name '*.java')
}

case "${1:-}" in
    jar)
        compile_main ;;
    test)
        compile_test
        "${JAVA[@]}" -Djava.util.logging.config.file=src/test/resources/logging.properties \
            -Didempotency.jdbcUrl="$2" -jar "$J/junit-platform-console-standalone.jar" \
            --class-path "build/main:build/test:$TEST_CP" --scan-class-path build/test \
            --disable-banner --disable-ansi-colors --details=tree ;;
    bench)
        compile_test
        "${JAVA[@]}" -cp "build/main:build/test:$TEST_CP" io.idempotency.spring.bench.DuplicateStorm "$2" "$3" ;;
    *)
        sed -n '4,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
