// pgx (v4, Debian's golang-github-jackc-pgx-v4-dev): the recipes of docs/clients/go.md, run
// against a server with the extension. Connects as PGHOST, PGPORT, PGUSER and PGDATABASE say.
// Exits 1 on the first claim that does not hold; prints one line of what it checked.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"time"

	"github.com/jackc/pgx/v4"
)

func check(ok bool, format string, args ...interface{}) {
	if !ok {
		fmt.Fprintf(os.Stderr, "pgx: FAILED: "+format+"\n", args...)
		os.Exit(1)
	}
}

func must(err error) {
	check(err == nil, "%v", err)
}

// region: json
type Order struct {
	ID       int64  `json:"id,string"` // the ID as a JSON string: every digit kept
	Customer string `json:"customer"`
}

// endregion

func main() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "") // PGHOST, PGDATABASE, ... from the environment
	must(err)
	defer conn.Close(ctx)
	if len(os.Args) > 1 && os.Args[1] == "js53" {
		js53(ctx, conn)
		return
	}
	customers := make([]string, 1000)
	for i := range customers {
		customers[i] = fmt.Sprintf("customer %d", i)
	}

	// region: schema
	_, err = conn.Exec(ctx, `CREATE TABLE orders (
		id bigint PRIMARY KEY DEFAULT snowflake_nextval(4),
		customer text NOT NULL
	)`)
	// endregion
	must(err)

	// region: insert
	var id int64
	err = conn.QueryRow(ctx,
		"INSERT INTO orders (customer) VALUES ($1) RETURNING id", "ada").Scan(&id)
	// endregion
	must(err)
	var stored int64
	must(conn.QueryRow(ctx, "SELECT id FROM orders WHERE customer = 'ada'").Scan(&stored))
	check(id == stored, "key read back %d, stored %d", id, stored)

	// region: batch
	rows, err := conn.Query(ctx,
		"INSERT INTO orders (customer) SELECT unnest($1::text[]) RETURNING id", customers)
	must(err)
	var ids []int64
	for rows.Next() {
		var id int64
		must(rows.Scan(&id))
		ids = append(ids, id)
	}
	must(rows.Err())
	// endregion
	check(len(ids) == len(customers), "%d batch keys, want %d", len(ids), len(customers))
	for i := 1; i < len(ids); i++ {
		check(ids[i-1] < ids[i], "batch keys not increasing: %d then %d", ids[i-1], ids[i])
	}
	rows, err = conn.Query(ctx, "SELECT id FROM orders WHERE customer <> 'ada' ORDER BY id")
	must(err)
	var all []int64
	for rows.Next() {
		var id int64
		must(rows.Scan(&id))
		all = append(all, id)
	}
	must(rows.Err())
	check(reflect.DeepEqual(ids, all), "batch keys differ from the stored ones")

	// region: decode
	var ts time.Time
	var shard, seq int32
	err = conn.QueryRow(ctx,
		"SELECT (snowflake_decode(id)).* FROM orders WHERE id = $1", id).Scan(&ts, &shard, &seq)
	// endregion
	must(err)
	var sqlTs time.Time
	var sqlShard, sqlSeq int32
	must(conn.QueryRow(ctx, "SELECT snowflake_timestamp($1), snowflake_shard($1), snowflake_seq($1)",
		id).Scan(&sqlTs, &sqlShard, &sqlSeq))
	check(ts.Equal(sqlTs) && shard == sqlShard && seq == sqlSeq && shard == 4,
		"decoded %v %d %d, scalar decoders %v %d %d", ts, shard, seq, sqlTs, sqlShard, sqlSeq)

	// The documented way to JSON keeps every digit...
	body, err := json.Marshal(Order{ID: id, Customer: "ada"})
	must(err)
	var back Order
	must(json.Unmarshal(body, &back))
	check(back.ID == id, "through JSON with ,string: %d, want %d", back.ID, id)
	// ... and a number read into interface{} (a float64) does not, for nearly every ID.
	changed := 0
	for _, id := range ids {
		number, err := json.Marshal(map[string]int64{"id": id})
		must(err)
		var generic map[string]interface{}
		must(json.Unmarshal(number, &generic))
		if int64(generic["id"].(float64)) != id {
			changed++
		}
	}
	check(changed > 0, "no ID changed through interface{}: the trap the docs state did not show")
	var token int64
	must(conn.QueryRow(ctx,
		"SELECT snowflake_compose(clock_timestamp() + interval '150 ms', 9, 0)").Scan(&token))
	seen := &token
	// region: causal
	// seen: the causality token, the largest ID this client was shown (by any server), or nil.
	// Observed first, the new key is above it whatever the two servers' clocks say.
	_, err = conn.Exec(ctx, "SELECT snowflake_observe($1)", seen)
	must(err)
	var after int64
	err = conn.QueryRow(ctx,
		"INSERT INTO orders (customer) VALUES ($1) RETURNING id", "bob").Scan(&after)
	// endregion
	must(err)
	check(after > token, "key %d not above the token %d", after, token)
	var none *int64
	must(conn.QueryRow(ctx, "SELECT snowflake_observe($1)", none).Scan(&none))
	check(none == nil, "a nil token observed %v", none)
	fmt.Printf("pgx v4: 1 key and %d batch keys read back as stored, increasing; decoded shard %d; "+
		"JSON with ,string keeps every digit; into interface{} %d of %d IDs change; "+
		"a key written after a token 150 ms ahead is above it\n",
		len(ids), shard, changed, len(ids))
}
