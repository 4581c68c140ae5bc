# Failover: a primary with a synchronous streaming standby.
# Clients claim and finish keys under load (in-transaction claims with
# concurrent duplicates, and leased claims finished with their fence); each
# client prints "ack KEY ..." only after the server acknowledged the COMMIT
# of the outcome.  The primary is stopped with -m immediate in the middle of
# the load and the standby is promoted.  On the new primary:
#   - every key acknowledged as succeeded replays its result;
#   - a leased claim acknowledged but not finished is still in progress
#     under its lease, is taken over after it (fence + 1, recovery point
#     kept), and the old worker's fence is refused (IK003);
#   - new claims work: in-transaction, and leased with a fenced finish.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(sleep);

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "log_statement = none\n");
$primary->start;
$primary->safe_psql('postgres', q{
CREATE EXTENSION idempotency;
CREATE TABLE orders (key text NOT NULL, client text NOT NULL);
-- the in-transaction pattern: claim, write, finish; returns what the
-- client answers (the new result or the replayed one)
CREATE FUNCTION place(k text, who text) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    c record;
    r jsonb;
BEGIN
    SELECT * INTO c FROM idem_claim(k, fingerprint => idem_fingerprint(jsonb_build_object('k', k)));
    IF c.outcome = 'claimed' THEN
        INSERT INTO orders VALUES (k, who);
        r := jsonb_build_object('by', who);
        PERFORM idem_finish(k, r);
        RETURN r;
    END IF;
    RETURN c.result;
END $$;
});

my $backup = 'base';
$primary->backup($backup);
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, $backup, has_streaming => 1);
$standby->start;
$primary->append_conf('postgresql.conf', "synchronous_standby_names = '*'\n");
$primary->reload;
ok( $primary->poll_query_until('postgres',
		"SELECT sync_state = 'sync' FROM pg_stat_replication"),
	'the standby is a synchronous standby');

# Client scripts.  Clients 1-4 go through the same keys (concurrent
# duplicates), 5-6 through keys of their own, 7-8 make leased claims and
# finish them in later transactions with their fence.
my $n_keys = 5000;
my @clients;
for my $c (1 .. 8)
{
	my $sql = "\\set ON_ERROR_STOP 1\n";
	for my $i (1 .. $n_keys)
	{
		if ($c <= 6)
		{
			my $key = $c <= 4 ? "shared-$i" : "own-$c-$i";
			$sql .= "BEGIN;\nSELECT place('$key', 'c$c') AS r \\gset\nCOMMIT;\n\\echo ack $key :r\n";
		}
		else
		{
			my $key = "lease-$c-$i";
			$sql .= "SELECT outcome AS o, fence AS f FROM idem_claim('$key', lease => '1 hour') \\gset\n"
			  . "\\echo claimed $key :o :f\n"
			  . "SELECT idem_checkpoint('$key', 'charged', fence => :f) \\g /dev/null\n"
			  . "SELECT idem_finish('$key', '{\"charge\": \"$key\"}', fence => :f) \\g /dev/null\n"
			  . "\\echo ack $key\n";
		}
	}
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-q', '-At', '-h', $primary->host, '-p', $primary->port, '-d', 'postgres' ],
		'<', \$sql, '>', \$out, '2>', \$err);
	push @clients, { h => $h, out => \$out, err => \$err };
}

# stop the primary in the middle of the load
my $acks = 0;
for (my $i = 0; $i < 600 && $acks < 1500; $i++)
{
	sleep(0.1);
	$acks = 0;
	for my $cl (@clients)
	{
		$cl->{h}->pump_nb;
		$acks += () = ${ $cl->{out} } =~ /^ack /mg;
	}
}
$primary->stop('immediate');
# psql dies with the server; IPC::Run then complains about the input it
# could not write
eval { $_->{h}->finish } for @clients;

my (%acked, %leased_claimed, %leased_acked);
for my $cl (@clients)
{
	for my $line (split /\n/, ${ $cl->{out} })
	{
		if ($line =~ /^ack (lease-\S+)$/) { $leased_acked{$1} = 1 }
		elsif ($line =~ /^ack (\S+) (.*)$/) { $acked{$1} = $2 }
		elsif ($line =~ /^claimed (\S+) claimed (\d+)$/) { $leased_claimed{$1} = $2 }
	}
}
my @unfinished = grep { !$leased_acked{$_} } sort keys %leased_claimed;
ok(keys %acked > 0 && keys %leased_acked > 0, 'clients had outcomes acknowledged before the stop');
ok(keys(%acked) + keys(%leased_acked) < 8 * $n_keys,
	'the stop cut the clients off in the middle of their work');

$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'the standby was promoted');

# every acknowledged outcome is on the new primary and replays
my $values = join ",\n", map { "('$_', '$acked{$_}'::jsonb)" } sort keys %acked;
my $lost = $standby->safe_psql('postgres', qq{
	SELECT count(*) FROM (VALUES $values) AS a(key, result),
	       LATERAL idem_claim(a.key, fingerprint => idem_fingerprint(jsonb_build_object('k', a.key))) c
	 WHERE c.outcome <> 'replay' OR c.result IS DISTINCT FROM a.result});
is($lost, '0',
	'every key acknowledged as succeeded replays its acknowledged result on the new primary');
my $lvalues = join ",", map { "('$_')" } sort keys %leased_acked;
my $lost_leased = $standby->safe_psql('postgres', qq{
	SELECT count(*) FROM (VALUES $lvalues) AS a(key), LATERAL idem_claim(a.key) c
	 WHERE c.outcome <> 'replay' OR c.result ->> 'charge' IS DISTINCT FROM a.key});
is($lost_leased, '0', 'every acknowledged leased finish replays on the new primary');
is( $standby->safe_psql('postgres', q{
	SELECT count(*) FROM (SELECT key FROM orders GROUP BY key HAVING count(*) > 1) d}),
	'0', 'no key has two orders on the new primary');
is( $standby->safe_psql('postgres', q{
	SELECT count(*) FROM idempotent_record r
	 WHERE (r.status = 'succeeded' AND r.key NOT LIKE 'lease-%'
	        AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.key = r.key))
	    OR (r.status = 'in_progress' AND r.locked_until IS NULL)}),
	'0', 'every succeeded key has its order, and no in-transaction claim is left open');

# a leased claim that was claimed but not finished when the primary died:
# still in progress under its lease; after the lease the next claim takes
# it over with the recovery point, and the old worker is fenced off
my ($pending) = grep {
	$standby->safe_psql('postgres', "SELECT status FROM idempotent_record WHERE key = '$_'")
	  eq 'in_progress'
} @unfinished;
SKIP:
{
	skip 'the stop fell between two leased claims', 4 unless defined $pending;
	is( $standby->safe_psql('postgres', "SELECT outcome FROM idem_claim('$pending', lease => '1 minute')"),
		'in_progress', "$pending: in progress under its lease on the new primary");
	$standby->safe_psql('postgres',
		"UPDATE idempotent_record SET locked_until = clock_timestamp() - interval '1 second' WHERE key = '$pending'");
	like( $standby->safe_psql('postgres',
			"SELECT outcome || ' ' || fence || ' ' || coalesce(recovery_point, '-') FROM idem_claim('$pending', lease => '1 minute')"),
		qr/^claimed 2 (charged|-)$/, "$pending: taken over after its lease with fence 2");
	my ($rc, $out, $err) = $standby->psql('postgres',
		"SELECT idem_finish('$pending', '{\"by\": \"old worker\"}', fence => 1)");
	like($err, qr/stale fence/, "$pending: the old worker's fence-1 finish is refused (IK003)");
	$standby->safe_psql('postgres', "SELECT idem_finish('$pending', '{\"by\": \"new worker\"}', fence => 2)");
	is( $standby->safe_psql('postgres', "SELECT outcome || ' ' || (result ->> 'by') FROM idem_claim('$pending')"),
		'replay new worker', "$pending: the new owner's result replays");
}

# new claims on the new primary
is( $standby->safe_psql('postgres', q{
	BEGIN;
	SELECT outcome FROM idem_claim('after-failover');
	SELECT idem_finish('after-failover', '{"n": 1}');
	COMMIT;
	SELECT outcome || ' ' || result FROM idem_claim('after-failover');}),
	"claimed\n\nreplay {\"n\": 1}",
	'an in-transaction claim and its finish work on the new primary');
is( $standby->safe_psql('postgres', q{
	SELECT outcome || ' ' || fence FROM idem_claim('after-failover-lease', lease => '1 minute');
	SELECT idem_finish('after-failover-lease', '{"n": 2}', fence => 1);
	SELECT outcome || ' ' || result FROM idem_claim('after-failover-lease');}),
	"claimed 1\n\nreplay {\"n\": 2}",
	'a leased claim and its fenced finish work on the new primary');

diag(sprintf('failover figures: acknowledged outcomes %d in-transaction + %d leased, '
	  . 'leased claims left unfinished %d, acknowledged outcomes lost or changed %d',
	scalar(keys %acked), scalar(keys %leased_acked), scalar(@unfinished),
	$lost + $lost_leased));

$standby->stop;
done_testing();
