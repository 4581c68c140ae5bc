# Crashes and leases: a leased claim survives a server stopped with
# -m immediate and is taken over after its lease; the crashed worker's
# fence-1 finish is refused.  A worker whose backend dies keeps the key
# until its lease ends, then loses it.  An in-transaction claim and its
# business write vanish together when the server dies before COMMIT.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use IdemTest;

my $node = idem_node('lease_crash');
$node->safe_psql('postgres', 'CREATE TABLE orders (key text, amount int)');

# SQL answers expected (in database postgres)
sub sql_is
{
	my ($sql, $expected, $name) = @_;
	is($node->safe_psql('postgres', $sql), $expected, $name);
}

# the same after the server was stopped -m immediate and started again
sub after_crash_is
{
	$node->stop('immediate');
	$node->start;
	sql_is(@_);
}

# 1. leased claim committed, then the server is stopped -m immediate
sql_is(
	"SELECT outcome || ' ' || fence FROM idem_claim('pay-1', lease => '1 hour')",
	'claimed 1',
	'leased claim commits on its own with fence 1');
$node->safe_psql('postgres',
	"SELECT idem_checkpoint('pay-1', 'charged', fence => 1)");
after_crash_is(
	"SELECT status || ' ' || fence || ' ' || recovery_point || ' ' || (locked_until IS NOT NULL) FROM idem_lookup('pay-1')",
	'in_progress 1 charged true',
	'after an immediate stop the leased claim, its lease and its recovery point are there');

end_lease($node, 'pay-1');
sql_is(
	"SELECT outcome || ' ' || fence || ' ' || recovery_point FROM idem_claim('pay-1', lease => '1 minute')",
	'claimed 2 charged',
	'after the lease the next claim takes over with fence 2 and the recovery point');

my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT idem_finish('pay-1', '{\"by\": \"crashed worker\"}', fence => 1)");
isnt($rc, 0, "the crashed worker's fence-1 finish fails");
like($err, qr/stale fence/, '... as a stale fence (IK003)');
$node->safe_psql('postgres',
	"SELECT idem_finish('pay-1', '{\"by\": \"new owner\"}', fence => 2)");
sql_is(
	"SELECT outcome || ' ' || (result ->> 'by') FROM idem_claim('pay-1')",
	'replay new owner',
	"duplicates replay the new owner's result");

# 2. a crashed worker: its backend is terminated after its leased claim;
# its lease (an hour, live whatever the machine's speed) is then ended.
my $worker = $node->background_psql('postgres');
my $claim = $worker->query_safe(
	"SELECT outcome || ' ' || fence || ' ' || pg_backend_pid() FROM idem_claim('k7', lease => '1 hour')");
like($claim, qr/^claimed 1 \d+$/, 'crashed worker: it claims k7 with a lease');
my ($worker_pid) = $claim =~ /(\d+)$/;
$node->safe_psql('postgres', "SELECT pg_terminate_backend($worker_pid)");
$node->poll_query_until('postgres',
	"SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $worker_pid)");
sql_is("SELECT outcome FROM idem_claim('k7', lease => '1 minute')",
	'in_progress',
	"crashed worker: during its lease a duplicate gets in_progress");
end_lease($node, 'k7');
sql_is(
	"SELECT outcome || ' ' || (fence > 1) FROM idem_claim('k7', lease => '1 minute')",
	'claimed true',
	"crashed worker: after its lease the key is claimed with a fence greater than its own");

# 3. an in-transaction claim and its business write: all or nothing
my $tx = $node->background_psql('postgres', on_error_stop => 0);
$tx->query_safe('BEGIN');
$tx->query_safe("SELECT outcome FROM idem_claim('ord-1')");
$tx->query_safe("INSERT INTO orders VALUES ('ord-1', 100)");
after_crash_is(
	"SELECT (SELECT count(*) FROM idempotent_record WHERE key = 'ord-1') || ' ' || (SELECT count(*) FROM orders)",
	'0 0',
	'an uncommitted in-transaction claim and its order are both gone after a crash');
sql_is(
	"BEGIN; SELECT outcome FROM idem_claim('ord-1'); INSERT INTO orders VALUES ('ord-1', 100); SELECT idem_finish('ord-1', '{}'); COMMIT;",
	"claimed\n",
	'the retry claims the key afresh');
after_crash_is(
	"SELECT (SELECT status FROM idempotent_record WHERE key = 'ord-1') || ' ' || (SELECT count(*) FROM orders)",
	'succeeded 1',
	'a committed claim, its outcome and its order all survive the next crash');

$node->stop;
done_testing();
