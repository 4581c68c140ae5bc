# idempotency_stats and idem_claim's wait_for_outcome need shared memory:
# without shared_preload_libraries the view, the reset and a waiting claim
# raise 55000 with a hint (the claim before writing anything), and the
# functions work without counting; with it, the counters count across
# sessions, per database (a database's view never shows another's claims,
# and its reset leaves the others'), for idempotency.stats_databases
# databases at most (a database beyond them is not counted and its view
# says so; a dropped database's counters go to the next one that needs
# them), and start from zero after a restart.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use IdemTest;

my $node = idem_node('stats_preload');

my $claim = q{
BEGIN;
SELECT outcome FROM idem_claim('k-' || pg_backend_pid() || '-' || clock_timestamp());
SELECT idem_finish(key, '{}') FROM idempotent_record WHERE status = 'in_progress';
COMMIT;
};

# 1. not preloaded
foreach my $sql ('SELECT * FROM idempotency_stats', 'SELECT idem_stats_reset()')
{
	my ($rc, $out, $err) = psql_verbose($node, $sql);
	isnt($rc, 0, "$sql fails without shared_preload_libraries");
	like($err, qr/ERROR:  55000: idempotency counters are not available/,
		'... with 55000 object_not_in_prerequisite_state');
	like($err, qr/HINT:  Add idempotency to shared_preload_libraries/,
		'... and a hint to preload the library');
}
{
	my ($rc, $out, $err) = psql_verbose($node,
		"SELECT * FROM idem_claim('w', lease => '1 minute', wait_for_outcome => '1 second')");
	isnt($rc, 0, 'a claim with wait_for_outcome fails without shared_preload_libraries');
	like($err, qr/ERROR:  55000: wait_for_outcome needs the idempotency library preloaded/,
		'... with 55000 object_not_in_prerequisite_state');
}
like($node->safe_psql('postgres', $claim), qr/^claimed$/m,
	'without preloading, claims work (counting is a no-op)');

# 2. preloaded
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'idempotency'");
$node->restart;
is( $node->safe_psql('postgres',
		'SELECT claims, replays, stats_reset <= clock_timestamp() FROM idempotency_stats'),
	'0|0|t', 'preloaded: the counters start at zero');
$node->safe_psql('postgres', $claim) for 1 .. 3;
# four keys now: the one claimed before preloading and these three
$node->safe_psql('postgres', q{SELECT idem_claim(key) FROM idempotent_record});
is($node->safe_psql('postgres', 'SELECT claims, replays FROM idempotency_stats'),
	'3|4', 'claims and replays of separate sessions add up');

$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION idempotency');
$node->safe_psql('other', $claim) for 1 .. 2;
is($node->safe_psql('postgres', 'SELECT claims, replays FROM idempotency_stats'),
	'3|4', 'claims in another database do not show in this database\'s view');
is($node->safe_psql('other', 'SELECT claims, replays FROM idempotency_stats'),
	'2|0', '... but in that database\'s, which shows none of this one\'s');
$node->safe_psql('other', 'SELECT idem_stats_reset()');
is($node->safe_psql('other', 'SELECT claims FROM idempotency_stats'),
	'0', 'idem_stats_reset zeroes the current database\'s counters');
is($node->safe_psql('postgres', 'SELECT claims, replays FROM idempotency_stats'),
	'3|4', '... and leaves the other databases\'');

# counters for idempotency.stats_databases databases: beyond them a
# database is not counted and its view refuses (55000), never showing
# another's; a dropped database's counters go to the next that needs them
$node->append_conf('postgresql.conf', 'idempotency.stats_databases = 2');
$node->restart;
$node->safe_psql($_, $claim) foreach ('postgres', 'other');
$node->safe_psql('postgres', 'CREATE DATABASE third');
$node->safe_psql('third', 'CREATE EXTENSION idempotency');
like($node->safe_psql('third', $claim), qr/^claimed$/m,
	'a database beyond idempotency.stats_databases works');
{
	my ($rc, $out, $err) = $node->psql('third', "\\set VERBOSITY verbose\nSELECT claims FROM idempotency_stats");
	isnt($rc, 0, '... its view fails');
	like($err, qr/ERROR:  55000: idempotency counters are not available in database "third"/,
		'... with 55000, naming the database');
	like($err, qr/HINT:  Raise idempotency.stats_databases/, '... and a hint to raise the setting');
}
is(join(' ', map { $node->safe_psql($_, 'SELECT claims FROM idempotency_stats') } ('postgres', 'other')),
	'1 1', '... and its claim shows in no other database\'s view');
$node->safe_psql('postgres', 'DROP DATABASE other');
is($node->safe_psql('third', 'SELECT claims FROM idempotency_stats'),
	'0', 'a dropped database\'s counters go, zeroed, to a database that had none');
$node->safe_psql('third', $claim);
is(join(' ', map { $node->safe_psql($_, 'SELECT claims FROM idempotency_stats') } ('postgres', 'third')),
	'1 1', '... which counts from then on');

$node->restart;
is($node->safe_psql('postgres', 'SELECT claims FROM idempotency_stats'),
	'0', 'a restart starts the counters from zero');

# the postgres_exporter query file reads the view: its query runs, and it
# describes every column it selects, in order (a HISTOGRAM column brings
# its _bucket, _sum and _count); test/exporter/exporter_test.py runs it in
# the exporter itself
my $queries = slurp_file("$ENV{TESTDIR}/examples/postgres_exporter_queries.yaml");
my ($query) = $queries =~ /^\s*query:\s*\|\n((?:\s{4,}\S.*\n)+)/m;
my @described = $queries =~ /^\s*- (\w+):\s*$/mg;
my ($list) = $query =~ /SELECT\s+(.*?)\s+FROM idempotency_stats/s;
my %brought = map { ("${_}_bucket" => 1, "${_}_sum" => 1, "${_}_count" => 1) } @described;
my @selected = grep { !$brought{$_} } map { /(\w+)\s*$/ } split /,/, $list;
is(join(',', @described), join(',', @selected),
	'the exporter query file describes each column it selects, in order');
is($node->safe_psql('postgres', "SELECT count(*) FROM ($query) AS q"), '1',
	'the exporter query runs against idempotency_stats');

$node->stop;
done_testing();
