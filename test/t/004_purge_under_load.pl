# Purge under load stays small and never touches a live lease.
# Many expired records, one live leased claim, and concurrent claims of new
# keys (pgbench) while idem_purge_all deletes in small batches: the purge
# finishes, the live claim survives, every claim succeeds, and no session
# waits on a row lock for as long as deadlock_timeout (log_lock_waits would
# say so).  Sizes are CI sizes; latency is measured by `make bench`, not here.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use FindBin;
use lib $FindBin::RealBin;
use IdemTest;

my $expired = 200_000;

my $node = idem_node('purge_load', conf => "log_lock_waits = on\ndeadlock_timeout = '20ms'\n");
$node->safe_psql('postgres', qq{
INSERT INTO idempotent_record (key, status, result, fence, created_at, updated_at, expires_at)
SELECT 'old-' || i, 'succeeded', '{"order": 1}', 1, now(), now(), now() - interval '1 hour'
  FROM generate_series(1, $expired) i;
SELECT outcome FROM idem_claim('live', lease => '1 hour', ttl => '1 second');
UPDATE idempotent_record SET expires_at = now() - interval '1 hour' WHERE key = 'live';
});

# claims of new keys, in-transaction, with their business outcome
my $script = "$PostgreSQL::Test::Utils::tmp_check/claims.pgbench";
open my $fh, '>', $script or die $!;
print $fh q{\set k random(1, 1000000000)
BEGIN;
SELECT outcome FROM idem_claim('new-' || :k || '-' || :client_id);
SELECT idem_finish('new-' || :k || '-' || :client_id, '{"ok": true}');
COMMIT;
};
close $fh;

my ($out, $err) = ('', '');
my $load = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '4', '-j', '2', '-T', '15', '-f', $script,
	  '-d', $node->connstr('postgres') ],
	'>', \$out, '2>', \$err);

# purge while the claims run
$node->safe_psql('postgres', 'CALL idem_purge_all(2000)');
my $after_purge = $node->safe_psql('postgres',
	"SELECT count(*) FROM idempotent_record WHERE key LIKE 'old-%'");
$load->finish;

is($after_purge, '0', "idem_purge_all removed all $expired expired records under load");
is( $node->safe_psql('postgres',
		"SELECT status || ' ' || fence FROM idempotent_record WHERE key = 'live'"),
	'in_progress 1',
	'the live leased claim survived, untouched');
like($out, qr/number of failed transactions: 0 /, 'every concurrent claim succeeded');
my ($claims) = $out =~ /number of transactions actually processed: (\d+)/;
ok($claims && $claims > 0, "claims ran beside the purge ($claims)");
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM idempotent_record WHERE key LIKE 'new-%' AND status = 'succeeded'"),
	$claims,
	'every claim made under load kept its outcome');
# a row lock wait shows as a wait for the other transaction or the tuple
ok(!$node->log_contains(qr/still waiting for \w+ on (transaction|tuple)/),
	'no session waited on a row lock for deadlock_timeout (20 ms): purge and claims do not block each other');
note("claims during purge: $claims");

$node->stop;
done_testing();
