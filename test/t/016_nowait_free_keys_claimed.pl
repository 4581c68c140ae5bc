# wait => false answers in_progress only when another transaction holds or
# writes the key: a key nobody else touches is always claimed, also while
# eight clients grow the table and wait for one another's extension of
# the table and its indexes (a lock wait that is not the key's).  Each
# client claims keys of its own with wait => false: new keys in-transaction
# (finished in the same transaction) and leased, and expired records
# (reclaimed), a fixed number of times; every answer must be claimed.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use IdemTest;

my $clients = 8;
my $per_client = 4000;

my $node = idem_node('nowait', conf => "fsync = off\nautovacuum = off\n");
$node->safe_psql('postgres', q{
CREATE TABLE answers (kind text NOT NULL, key text NOT NULL, outcome text);
CREATE SEQUENCE new_keys;
CREATE SEQUENCE expired_keys;
-- expired records, each reclaimed by one claim; 1 kB fingerprints make
-- the table grow by a page every few writes
INSERT INTO idempotent_record (key, status, result, fingerprint, fence, created_at, updated_at, expires_at)
SELECT 'expired-' || i, 'succeeded', '{}', decode(repeat('ab', 1000), 'hex'), 1,
       now() - interval '2 days', now() - interval '2 days', now() - interval '1 day'
  FROM generate_series(1, 16000) AS i;
});

my $fp = q{decode(repeat('cd', 1000), 'hex')};
# an in-transaction claim of a key named prefix-N (N from sequence),
# finished in the same transaction when claimed
sub in_transaction_script
{
	my ($kind, $prefix, $sequence) = @_;
	return qq{
BEGIN;
SELECT s.k AS k, c.outcome AS o
  FROM (SELECT '$prefix-' || nextval('$sequence') AS k) s,
       idem_claim(s.k, fingerprint => $fp, wait => false) c \\gset
SELECT idem_finish(:k, '{}') WHERE :o = 'claimed';
INSERT INTO answers VALUES ('$kind', :k, :o);
COMMIT;
};
}
$node->pgbench(
	"-n -M prepared -c $clients -j $clients -t $per_client",
	0,
	[qr/number of transactions actually processed: @{[ $clients * $per_client ]}/],
	[qr/^$/],
	'eight clients claim keys nobody else touches with wait => false',
	{
		'in_transaction' => in_transaction_script('in-transaction', 'new', 'new_keys'),
		'reclaim' => in_transaction_script('reclaim', 'expired', 'expired_keys'),
		'leased' => qq{
SELECT s.k AS k, c.outcome AS o
  FROM (SELECT 'leased-' || nextval('new_keys') AS k) s,
       idem_claim(s.k, fingerprint => $fp, wait => false, lease => '1 hour') c \\gset
INSERT INTO answers VALUES ('leased', :k, :o);
},
	});

diag($node->safe_psql('postgres', q{
SELECT string_agg(kind || ' ' || outcome || ': ' || n, ', ' ORDER BY kind, outcome)
  FROM (SELECT kind, outcome, count(*) AS n FROM answers GROUP BY 1, 2) AS s}));
is($node->safe_psql('postgres', 'SELECT count(*) FROM answers'),
	$clients * $per_client, 'every claim answered');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM answers WHERE outcome IS DISTINCT FROM 'claimed'}),
	'0', 'every answer is claimed');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM answers a JOIN idempotent_record r USING (key)
 WHERE r.status <> (CASE a.kind WHEN 'leased' THEN 'in_progress' ELSE 'succeeded' END)::idem_status
    OR r.fence <> (CASE a.kind WHEN 'reclaim' THEN 2 ELSE 1 END)}),
	'0', 'every claimed key has its record: finished or leased, fence 1, reclaimed ones fence 2');

$node->stop;
done_testing();
