// pgx on a server in the js53 layout (`pgx js53`): the recipe of docs/clients/go.md ("With the
// js53 layout"), IDs as plain JSON numbers, also read back into interface{} (a float64).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v4"
)

// region: js53
// Where snowflake_id.layout = 'js53' every ID is at most 2^53 - 1: a plain JSON number, which
// readers taking numbers as float64 (interface{}, JavaScript) keep exactly.
type Order53 struct {
	ID       int64  `json:"id"`
	Customer string `json:"customer"`
}

// endregion

func js53(ctx context.Context, conn *pgx.Conn) {
	var idBits string
	must(conn.QueryRow(ctx, "SHOW snowflake_id.id_bits").Scan(&idBits))
	check(idBits == "53", "the server runs id_bits = %s, not the js53 layout", idBits)
	_, err := conn.Exec(ctx, `CREATE TABLE orders (
		id bigint PRIMARY KEY DEFAULT snowflake_nextval(4),
		customer text NOT NULL
	)`)
	must(err)
	var id int64
	must(conn.QueryRow(ctx, "INSERT INTO orders (customer) VALUES ($1) RETURNING id", "ada").Scan(&id))
	body, err := json.Marshal(Order53{ID: id, Customer: "ada"})
	must(err)
	var text string
	must(conn.QueryRow(ctx, "SELECT id::text FROM orders WHERE id = $1", id).Scan(&text))
	check(string(body) == `{"id":`+text+`,"customer":"ada"}`, "the body %s does not carry %s as a number", body, text)
	var generic map[string]interface{}
	must(json.Unmarshal(body, &generic))
	check(strconv.FormatInt(int64(generic["id"].(float64)), 10) == text,
		"the body read into interface{}: %v, stored %s", generic["id"], text)

	// The server's own JSON, read into interface{}: the same number.
	var serverJSON string
	must(conn.QueryRow(ctx, "SELECT snowflake_json($1)::text", id).Scan(&serverJSON))
	var parts map[string]interface{}
	must(json.Unmarshal([]byte(serverJSON), &parts))
	check(int64(parts["id"].(float64)) == id, "snowflake_json %s read as %v, want %d", serverJSON, parts["id"], id)

	// A batch, through JSON read as float64: every ID the stored one.
	customers := make([]string, 1000)
	for i := range customers {
		customers[i] = fmt.Sprintf("customer %d", i)
	}
	rows, err := conn.Query(ctx, "INSERT INTO orders (customer) SELECT unnest($1::text[]) RETURNING id", customers)
	must(err)
	var ids []int64
	for rows.Next() {
		var id int64
		must(rows.Scan(&id))
		ids = append(ids, id)
	}
	must(rows.Err())
	check(len(ids) == len(customers), "%d batch keys, want %d", len(ids), len(customers))
	rows, err = conn.Query(ctx, "SELECT id::text FROM orders WHERE customer <> 'ada' ORDER BY id")
	must(err)
	var stored []string
	for rows.Next() {
		var text string
		must(rows.Scan(&text))
		stored = append(stored, text)
	}
	must(rows.Err())
	batch, err := json.Marshal(ids)
	must(err)
	var doubles []float64
	must(json.Unmarshal(batch, &doubles))
	check(len(doubles) == len(stored), "%d keys through JSON, %d stored", len(doubles), len(stored))
	for i, double := range doubles {
		check(strconv.FormatInt(int64(double), 10) == stored[i],
			"batch key %d through JSON as float64: %v, stored %v", i, double, stored[i])
	}
	for i := 1; i < len(ids); i++ {
		check(ids[i-1] < ids[i], "batch keys not increasing: %d then %d", ids[i-1], ids[i])
	}
	fmt.Printf("pgx v4 on js53: 1 key and %d batch keys as plain JSON numbers, every digit the stored one "+
		"read back as float64; snowflake_json read alike\n", len(ids))
}
