"""The fixed text :mod:`abtui.engine.perplexity` scores: plain English prose written for abtui
(no digits, no markup, no quality-suite formats), long enough for two 512-token chunks of any
common tokenizer (~1,500 words)."""

PPL_TEXT = """\
The river town woke slowly in the autumn. Mist lay over the water until the sun was well above
the trees, and the ferryman waited on the far bank with his hands in his pockets, watching the
first carts come down the hill. He had crossed that river more times than he could count, and
he knew its moods the way a farmer knows the sky. On calm days he let the current carry the
boat halfway before he pulled on the rope; on rough days he said little and kept his eyes on
the landing stage.

Most of the people who crossed in the morning were going to the market. They brought eggs and
honey, sacks of potatoes, wool that still smelled of the sheep, and baskets of late plums that
would not keep another week. The market itself was an old square paved with uneven stones,
surrounded by narrow houses whose upper floors leaned toward each other as if they wanted to
share a secret. In the middle stood a stone trough where horses had once been watered. Now
children sat on its edge and dangled their feet while their parents argued about prices.

The baker's shop was on the corner nearest the church. Her bread was famous in the valley, not
because it was unusual, but because it was always the same: a dark crust, a soft grey crumb,
and a faint sourness that people said reminded them of their grandmothers' kitchens. She
started work long before dawn, when the only other light in the street came from the stable
where the carrier fed his horses. By the time the ferry made its first crossing, the shelves
were full and the smell had drifted halfway down to the water.

Across the square lived the schoolmaster, a tall and careful man who walked with his hands
behind his back. He taught reading, arithmetic and a little history to thirty children in a
single room, and he believed that every one of them could learn if the lesson was explained
slowly enough. In the evenings he wrote letters to a cousin who lived in the capital, long
letters full of questions about books and newspapers and the price of coal. The cousin rarely
answered, but the schoolmaster went on writing, because the act of putting his thoughts in
order gave him a kind of peace.

Not everyone in the town was content. The young men complained that nothing ever happened, that
the roads were bad and the wages worse, and that the only way to make something of yourself was
to leave. Some of them did leave. They went to work in the mills downstream or on the ships
that carried grain to the coast, and for a year or two they sent money home. Then the letters
became shorter and less frequent, and their mothers learned to stop waiting at the ferry on
the first day of every month.

Those who stayed found their own ways to be useful. The blacksmith's son, who had no talent for
iron, turned out to be very good with clocks. He repaired the church clock when it stopped one
winter, and after that people brought him watches, music boxes and, once, a mechanical bird
that had belonged to a countess. He worked at a bench under the window, with a lens screwed
into one eye, and he hummed while he worked, always the same few bars of a song nobody else
seemed to know.

In spring the river rose. Snow melted in the mountains and the water turned brown and fast,
carrying branches, fence posts and now and then a drowned sheep. The ferry stopped running for
a week or more, and the town was cut off from the farms on the other side. This was the time
when the old people told stories: about the great flood that had taken the mill, about the
winter the river froze so hard that a wedding party walked across it, about the stranger who
arrived one night with a chest of silver and left the next morning without it.

Nobody knew how much of these stories was true. The schoolmaster had tried to find the flood
in the parish records and had found a flood, but in a different year and with a different
mill. The frozen river was possible; the winters had been colder then. The stranger with the
silver was probably invented, or borrowed from some other town, but the children loved that
story most of all, and each of them had a theory about where the chest was buried.

When the water went down, the town set about repairing what the flood had damaged. Walls were
rebuilt, gardens replanted, and the landing stage, which was always the first thing to suffer,
was patched with new planks that looked pale and bright beside the old grey ones. The ferryman
inspected his rope inch by inch and replaced the worst of it. Then the carts came down the
hill again, the market filled, and life went on as if the river had never risen at all.

Summer brought visitors. A painter rented a room above the inn and spent his days on the hill,
trying to capture the light on the water. He was not very good, the innkeeper said, but he
paid on time and he was polite to the maids. A family from the city came for a month every
year and took long walks with a dog that was afraid of cows. A botanist arrived with a tin box
and a notebook and went home delighted, having found a small blue flower that grew nowhere
else in the country, on a damp bank just below the churchyard.

The botanist's flower made the town briefly famous. A newspaper printed a short article about
it, with a drawing that did not look much like the real thing, and for a few weeks strangers
came to see it. Some of them picked it, which made the schoolmaster furious. He wrote to the
newspaper, and then to the county council, and finally he persuaded the priest to let him put
a low fence around the bank. The flower survived, the strangers stopped coming, and the fence
remained, leaning a little more each year, long after anyone remembered why it was there.

Autumn returned, as it always did. The plums ripened and were sold, the wool was sheared and
carded, and the mist lay over the river again in the mornings. The ferryman, who was older now,
took on a boy to help him with the rope. The boy was quick and cheerful and talked without
stopping, and the ferryman, who had spent most of his life in silence, found to his surprise
that he did not mind. On calm days he let the boy steer, and he sat in the stern with his eyes
half closed, listening to the water and to the stories the boy told him about the town, most
of which he had heard before, and some of which he had once told himself.
"""
