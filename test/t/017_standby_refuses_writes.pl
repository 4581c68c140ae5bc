# On a hot standby every function that may write raises 25006 before it
# reads anything, whatever the records hold (a finished key, a seen
# message id, a leased claim, a token); the reads work.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->start;
$primary->safe_psql('postgres', q{
CREATE EXTENSION idempotency;
-- the SQLSTATE a statement raises, or ok
CREATE FUNCTION sqlstate_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;
CREATE TABLE orders (id int PRIMARY KEY, status text);
INSERT INTO orders VALUES (1, 'pending');
});
$primary->safe_psql('postgres', q{
BEGIN;
SELECT idem_claim('finished');
SELECT idem_finish('finished', '{"done": true}');
COMMIT;
SELECT idem_claim('leased', lease => '1 hour');
SELECT idem_once('seen');
INSERT INTO idempotency_token (scope, token, created_at, expires_at)
VALUES ('form', 'issued', now(), now() + interval '1 hour');
});

$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

my @writes = (
	q{SELECT idem_claim('finished')},
	q{SELECT idem_claim('new', wait => false)},
	q{SELECT idem_once('seen')},
	q{SELECT idem_once('unseen')},
	q{SELECT idem_finish('leased', '{}', fence => 1)},
	q{SELECT idem_fail('leased', '{}', fence => 1)},
	q{SELECT idem_mark_unknown('leased', '{}', fence => 1)},
	q{SELECT idem_checkpoint('leased', 'charged', fence => 1)},
	q{SELECT idem_extend_lease('leased', '1 minute', fence => 1)},
	q{SELECT idem_purge(10)},
	q{SELECT idem_token_issue('form')},
	q{SELECT idem_token_consume('issued', 'form')},
	q{SELECT idem_transition('orders', 1, 'paid', ARRAY['pending'])});
for my $write (@writes)
{
	(my $quoted = $write) =~ s/'/''/g;
	is($standby->safe_psql('postgres', "SELECT sqlstate_of('$quoted')"),
		'25006', "standby: $write raises 25006");
}
like(
	($standby->psql('postgres', q{SELECT idem_once('seen')}))[2],
	qr/ERROR:  cannot execute idem_once in a read-only transaction/,
	'standby: the error says why');

is( $standby->safe_psql('postgres',
		q{SELECT status || ' ' || (result ->> 'done') FROM idem_lookup('finished')}),
	'succeeded true', 'standby: idem_lookup reads the record');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM idem_pending'),
	'0', 'standby: idem_pending reads');

$standby->stop;
$primary->stop;
done_testing();
